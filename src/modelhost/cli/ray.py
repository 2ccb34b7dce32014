"""`modelhost ray serve`: a Triton model repository served by Ray Serve deployments (docs/ray.md)."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import NoReturn

from modelhost.options import LogOptions, ServerOptions, bool_or_none

USAGE_ERROR = 2

DESCRIPTION = """\
Deploy a model repository onto a Ray cluster, each model (or group of models named in --deployments) a Ray
Serve deployment that scales on its own, and answer KServe v2 HTTP and gRPC for all of them here, as one
modelhost server does. Needs the `ray` extra: pip install 'modelhost[ray]'.
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        print(f"modelhost ray: error: {message}", file=sys.stderr)
        raise SystemExit(USAGE_ERROR)


def _flag(value: str) -> bool:
    parsed = bool_or_none(value)
    if parsed is None:
        raise argparse.ArgumentTypeError(f"expected true or false, not '{value}'")
    return parsed


def parser() -> argparse.ArgumentParser:
    top = _Parser(prog="modelhost ray", description=DESCRIPTION, allow_abbrev=False)
    commands = top.add_subparsers(title="commands", dest="command", metavar="COMMAND", required=True)
    serve = commands.add_parser(
        "serve", help="Deploy a model repository and serve it.", description=DESCRIPTION
    )
    _serve_options(serve)
    config = commands.add_parser(
        "config",
        help="Print the Ray Serve config (a RayService's serveConfigV2) of a repository's deployments.",
    )
    _plan_options(config)
    return top


def serve_parser() -> argparse.ArgumentParser:
    """The options of `modelhost ray serve` alone (what the docs' checks read)."""
    serve = _Parser(prog="modelhost ray serve", description=DESCRIPTION, allow_abbrev=False)
    _serve_options(serve)
    return serve


def _plan_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model-repository",
        action="append",
        required=True,
        metavar="PATH",
        help="A model repository (a path every Ray node can read, or s3://, gs://, as://); may be repeated.",
    )
    parser.add_argument(
        "--deployments", metavar="FILE", help="Which models share a deployment, replicas, resources (YAML)."
    )


def _serve_options(serve: argparse.ArgumentParser) -> None:
    _plan_options(serve)
    serve.add_argument(
        "--attach",
        type=_flag,
        default=False,
        metavar="BOOL",
        help="Serve the deployments as deployed by others (a RayService from `modelhost ray config`): deploy "
        "nothing, refuse model control.",
    )
    serve.add_argument(
        "--address",
        metavar="ADDRESS",
        help="The Ray cluster to join (host:port of its head, or 'auto'); default: start a local one.",
    )
    serve.add_argument(
        "--num-cpus", type=int, metavar="N", help="CPUs of the local cluster started (default: all)."
    )
    serve.add_argument("--http-address", default="0.0.0.0")
    serve.add_argument("--http-port", type=int, default=8000)
    serve.add_argument("--allow-http", type=_flag, default=True, metavar="BOOL")
    serve.add_argument("--grpc-address", default="0.0.0.0")
    serve.add_argument("--grpc-port", type=int, default=8001)
    serve.add_argument("--allow-grpc", type=_flag, default=True, metavar="BOOL")
    serve.add_argument("--metrics-address", default="0.0.0.0")
    serve.add_argument("--metrics-port", type=int, default=8002)
    serve.add_argument("--allow-metrics", type=_flag, default=True, metavar="BOOL")
    serve.add_argument(
        "--strict-readiness",
        type=_flag,
        default=True,
        metavar="BOOL",
        help="Ready only while every deployment runs (true), or whenever the ingress serves (false).",
    )
    serve.add_argument("--log-verbose", type=int, default=0, metavar="LEVEL")
    _frontend_options(serve)


def _frontend_options(serve: argparse.ArgumentParser) -> None:
    """The ingress's ports as `modelhost serve`'s: TLS, restricted APIs and header forwarding, same flags."""
    for port in ("http", "grpc"):
        serve.add_argument(f"--{port}-use-ssl", type=_flag, default=False, metavar="BOOL")
        serve.add_argument(f"--{port}-use-ssl-mutual", type=_flag, default=False, metavar="BOOL")
        for name in ("server-cert", "server-key", "root-cert"):
            serve.add_argument(f"--{port}-{name}", default="", metavar="PEM")
        serve.add_argument(f"--{port}-header-forward-pattern", default="", metavar="REGEX")
    serve.add_argument(
        "--http-restricted-api",
        action="append",
        default=[],
        metavar="APIS:KEY=VALUE",
        help="As `modelhost serve --http-restricted-api`; may be repeated.",
    )
    serve.add_argument(
        "--grpc-restricted-protocol",
        action="append",
        default=[],
        metavar="PROTOCOLS:KEY=VALUE",
        help="As `modelhost serve --grpc-restricted-protocol`; may be repeated.",
    )


def frontend_options(args: argparse.Namespace) -> ServerOptions:
    """What the flags ask of the ingress's HTTP and gRPC ports, checked as `modelhost serve` checks them
    (ValueError in its words)."""
    from modelhost.frontends.restrictions import GRPC_HEADER_PREFIX, Restrictions, add_restriction

    http: Restrictions = {}
    grpc: Restrictions = {}
    for raw in args.http_restricted_api:
        add_restriction(http, raw, "http-restricted-api")
    for raw in args.grpc_restricted_protocol:
        add_restriction(
            grpc, raw, "grpc-restricted-protocol", key_prefix=GRPC_HEADER_PREFIX, feature="protocol"
        )
    tls = {
        f"{port}_{name}": getattr(args, f"{port}_{name}")
        for port in ("http", "grpc")
        for name in ("use_ssl", "use_ssl_mutual", "server_cert", "server_key", "root_cert")
    }
    return ServerOptions(
        model_repositories=list(args.model_repository),
        http_restricted_api=http,
        grpc_restricted_protocol=grpc,
        http_header_forward_pattern=args.http_header_forward_pattern,
        grpc_header_forward_pattern=args.grpc_header_forward_pattern,
        **tls,
    )


def main(argv: Sequence[str]) -> int:
    try:
        args = parser().parse_args(list(argv))
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else 0
    if args.command == "config":
        return _print_config(args)
    try:
        import ray  # noqa: F401 - only to say clearly that the extra is missing
    except ImportError:
        print("modelhost ray: error: Ray is not installed: pip install 'modelhost[ray]'", file=sys.stderr)
        return USAGE_ERROR
    from modelhost.cluster.ingress import IngressSettings, serve
    from modelhost.cluster.plan import PlanError, read_plan
    from modelhost.observability.logs import configure_logging

    configure_logging(LogOptions(verbose=args.log_verbose))
    try:
        frontend = frontend_options(args)
        plan = read_plan(args.model_repository, args.deployments)
    except (PlanError, ValueError) as e:
        print(f"modelhost ray: error: {e}", file=sys.stderr)
        return USAGE_ERROR
    settings = IngressSettings(
        address=args.address,
        num_cpus=args.num_cpus,
        http_address=args.http_address,
        http_port=args.http_port if args.allow_http else None,
        grpc_address=args.grpc_address,
        grpc_port=args.grpc_port if args.allow_grpc else None,
        metrics_address=args.metrics_address,
        metrics_port=args.metrics_port if args.allow_metrics else None,
        strict_readiness=args.strict_readiness,
        attach=args.attach,
        frontend=frontend,
    )
    logging.getLogger("modelhost").info("serving %s on Ray", ", ".join(args.model_repository))
    import uvloop

    try:
        return int(uvloop.run(serve(plan, settings)))
    except KeyboardInterrupt:
        return 130


def _print_config(args: argparse.Namespace) -> int:
    """`modelhost ray config`: the Serve config of the plan, as YAML, for a RayService or `serve deploy`."""
    import yaml

    from modelhost.cluster.apps import serve_config
    from modelhost.cluster.plan import PlanError, read_plan

    try:
        plan = read_plan(args.model_repository, args.deployments)
    except PlanError as e:
        print(f"modelhost ray: error: {e}", file=sys.stderr)
        return USAGE_ERROR
    from modelhost.cluster.sizing import measure, sized

    sys.stdout.write(yaml.safe_dump(serve_config(sized(plan, measure(plan))), sort_keys=False))
    return 0
