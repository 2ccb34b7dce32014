"""What the console shows of the server that no endpoint answers: how it was started (ports, frontend processes,
the memory budget) and which process is the engine. Made by the engine from its options and handed to each
frontend process with the rest of its configuration."""

from __future__ import annotations

import msgspec

from modelhost.options import ServerOptions


class ConsoleSettings(msgspec.Struct, frozen=True):
    # The engine process: its start time is the server's uptime; its process tree's memory and CPU are shown.
    engine_pid: int = 0
    # Protocol -> port, for the ports that serve (http, grpc, metrics, sagemaker, vertex_ai).
    ports: dict[str, int] = {}
    frontend_processes: int = 0
    model_control_mode: str = "none"
    # --model-memory-budget in bytes; None without one.
    memory_budget: int | None = None


def console_settings(options: ServerOptions, engine_pid: int) -> ConsoleSettings | None:
    """The console's settings for a server with these options; None with --http-console=false."""
    if not options.http_console:
        return None
    ports = {"http": options.http_port}
    if options.allow_grpc:
        ports["grpc"] = options.grpc_port
    if options.allow_metrics:
        ports["metrics"] = options.metrics_port
    return ConsoleSettings(
        engine_pid=engine_pid,
        ports=ports,
        frontend_processes=options.frontend_processes,
        model_control_mode=options.model_control_mode,
        memory_budget=options.model_memory_budget,
    )
