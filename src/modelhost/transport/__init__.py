"""How frontend processes talk to the engine process (--frontend-processes=N).

`messages` holds what travels, `framing` how it travels (length-prefixed msgpack frames over a Unix stream, writes
coalesced once per event-loop turn), `engine_side` serves the frontends' calls against the in-process core, and
`frontend_side` is the frontends' end of the link.
"""
