"""How frontend processes talk to the engine process (--frontend-processes=N): `EngineAPI` calls over a Unix socket.

`messages` holds what travels, `framing` how it travels (length-prefixed msgpack frames over a Unix stream, writes
coalesced once per event-loop turn), `tensors` requests and responses on the link, `server` the engine's end (it
serves the frontends' calls against the engine), and `client` the frontends' end (`RemoteEngine`).
"""
