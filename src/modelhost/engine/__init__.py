"""The engine: models, their versions and lifecycle, scheduling and execution; it implements
`modelhost.engine_api.EngineAPI`. Nothing in it speaks a wire protocol."""
