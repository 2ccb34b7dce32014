"""The frontends: everything that speaks a wire protocol (HTTP, gRPC) and nothing that holds model state.

They call the engine through `modelhost.engine_api.EngineAPI`, in process or across the transport.
"""
