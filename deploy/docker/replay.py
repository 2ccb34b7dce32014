#!/usr/bin/env python3
"""Replays a deploy/docker image without a container daemon, from its Dockerfile, so the two cannot drift.

    python3 deploy/docker/replay.py [--dockerfile deploy/docker/Dockerfile] [--build-arg NAME=VALUE ...]
    python3 deploy/docker/replay.py --dockerfile deploy/docker/Dockerfile.gpu --resolve-only

`run` (the default) does what `docker build` and `docker run` would, as far as a virtual environment can:
  1. parses the Dockerfile (stages, ARG, ENV, RUN --mount, COPY --from, USER, WORKDIR, EXPOSE, and the
     exec-form ENTRYPOINT, CMD and HEALTHCHECK);
  2. copies the build context (the repository, filtered by .dockerignore) and runs the build stage's
     `install.sh venv ...` RUN line with its build args, in-image paths mapped into a temporary directory
     (/opt/modelhost -> TMP/opt/modelhost, /src -> TMP/context); system steps (apt, useradd) are listed, not run;
  3. in a private network namespace (as a container has; `unshare`), so the image's own ports are used and
     nothing on the host is in the way: starts ENTRYPOINT + CMD with the image's ENV, WORKDIR and USER (when
     run as root), runs the HEALTHCHECK command until it passes, checks that every bundled model is ready, the
     EXPOSEd ports listen and `simple` answers an inference; stops it with SIGTERM (exit code 0);
  4. the same for `serve` (SageMaker): a model directory holding `simple` alone, /ping and POST /invocations.
`--resolve-only` stops after resolving the venv step with `pip install --dry-run` against PyPI alone (the
host's pip configuration is set aside, as a docker build has none): for the GPU image, which needs a GPU.
`--parse-only` checks the Dockerfile alone. Python 3.11+, standard library only.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_PORTS = {"http": 8000, "grpc": 8001, "metrics": 8002, "sagemaker": 8080}
STOP_TIMEOUT_S = 45.0  # --exit-timeout-secs defaults to 30


class ReplayError(Exception):
    pass


# ----------------------------------------------------------------------------------------------------------
# Dockerfile


@dataclass
class Instruction:
    keyword: str  # upper case
    flags: dict[str, str]  # leading --name=value (RUN --mount may repeat: kept in `mounts`)
    args: str
    line: int
    mounts: list[dict[str, str]] = field(default_factory=list)


@dataclass
class Stage:
    base: str
    name: str
    instructions: list[Instruction]

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def last(self, keyword: str) -> Instruction | None:
        found = self.all(keyword)
        return found[-1] if found else None


@dataclass
class Dockerfile:
    global_args: list[Instruction]
    stages: list[Stage]

    @property
    def final(self) -> Stage:
        return self.stages[-1]

    def stage(self, name: str) -> Stage:
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise ReplayError(f"no stage named {name!r}")


_FLAG = re.compile(r"--([a-z-]+)=(\S+)\s+")


def logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """(first line number, instruction text): continuation lines joined, comment lines dropped (Docker drops
    them inside a continuation too)."""
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if stripped.startswith("#") or not stripped:  # blank lines inside a continuation too
            continue
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending.append(stripped[:-1].strip())
            continue
        pending.append(stripped)
        yield start, " ".join(part for part in pending if part)
        pending = []
    if pending:
        yield start, " ".join(pending)


def _instruction(line: int, text: str) -> Instruction:
    keyword, _, rest = text.partition(" ")
    keyword = keyword.upper()
    flags: dict[str, str] = {}
    mounts: list[dict[str, str]] = []
    rest = rest.strip() + " "
    if keyword in ("RUN", "COPY", "ADD", "HEALTHCHECK", "FROM"):
        while match := _FLAG.match(rest):
            name, value = match.groups()
            if name == "mount":
                mounts.append(dict(part.partition("=")[::2] for part in value.split(",")))
            else:
                flags[name] = value
            rest = rest[match.end() :]
    return Instruction(keyword, flags, rest.strip(), line, mounts)


def parse_dockerfile(text: str) -> Dockerfile:
    global_args: list[Instruction] = []
    stages: list[Stage] = []
    for line, logical in logical_lines(text):
        instruction = _instruction(line, logical)
        if instruction.keyword == "FROM":
            base, _, name = instruction.args.partition(" AS ")
            if not name:
                base, _, name = instruction.args.partition(" as ")
            stages.append(Stage(base.strip(), name.strip() or str(len(stages)), []))
        elif not stages:
            if instruction.keyword != "ARG":
                raise ReplayError(f"line {line}: {instruction.keyword} before the first FROM")
            global_args.append(instruction)
        else:
            stages[-1].instructions.append(instruction)
    if not stages:
        raise ReplayError("no FROM in the Dockerfile")
    return Dockerfile(global_args, stages)


def exec_form(instruction: Instruction | None, what: str) -> list[str]:
    """The JSON array of an exec-form ENTRYPOINT/CMD (a shell form would run under /bin/sh -c, which then is
    PID 1 and does not pass SIGTERM on to the server)."""
    if instruction is None:
        raise ReplayError(f"no {what}")
    try:
        value = json.loads(instruction.args)
    except json.JSONDecodeError as error:
        raise ReplayError(f"line {instruction.line}: {what} is not exec form: {instruction.args}") from error
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ReplayError(f"line {instruction.line}: {what} is not a JSON array of strings")
    return value


@dataclass
class Healthcheck:
    command: list[str]
    interval_s: float
    timeout_s: float
    start_period_s: float
    retries: int


def _duration(text: str) -> float:
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ReplayError(f"bad duration {text!r}")
    return sum(float(n) * units[u] for n, u in parts)


def healthcheck(stage: Stage) -> Healthcheck:
    instruction = stage.last("HEALTHCHECK")
    if instruction is None:
        raise ReplayError("no HEALTHCHECK")
    keyword, _, command = instruction.args.partition(" ")
    if keyword.upper() != "CMD":
        raise ReplayError(f"line {instruction.line}: HEALTHCHECK {instruction.args} (want CMD [...])")
    exec_args = Instruction("HEALTHCHECK", {}, command.strip(), instruction.line)
    flags = instruction.flags
    return Healthcheck(
        exec_form(exec_args, "HEALTHCHECK CMD"),
        _duration(flags.get("interval", "30s")),
        _duration(flags.get("timeout", "30s")),
        _duration(flags.get("start-period", "0s")),
        int(flags.get("retries", "3")),
    )


_VARIABLE = re.compile(r"\$(?:\{(\w+)(?::([-+])([^}]*))?\}|(\w+))")


def expand(text: str, values: Mapping[str, str]) -> str:
    """Docker's $NAME, ${NAME}, ${NAME:-word}, ${NAME:+word}."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(4)
        value = values.get(name, "")
        if match.group(2) == "-":
            return value or match.group(3)
        if match.group(2) == "+":
            return match.group(3) if value else ""
        return value

    return _VARIABLE.sub(one, text)


def _pairs(args: str) -> list[tuple[str, str]]:
    """NAME=VALUE pairs of ENV/LABEL/ARG (quotes removed); ARG NAME alone gives (NAME, "\\0")."""
    import shlex

    pairs = []
    for token in shlex.split(args, posix=True):
        name, sep, value = token.partition("=")
        pairs.append((name, value if sep else "\0"))
    return pairs


def stage_args(dockerfile: Dockerfile, stage: Stage, build_args: Mapping[str, str]) -> dict[str, str]:
    """The build args a stage's RUN lines see as environment variables (its ARGs, build args first)."""
    global_values: dict[str, str] = {}
    for instruction in dockerfile.global_args:
        for name, default in _pairs(instruction.args):
            global_values[name] = build_args.get(name, "" if default == "\0" else default)
    values: dict[str, str] = {}
    for instruction in stage.all("ARG"):
        for name, default in _pairs(instruction.args):
            if name in build_args:
                values[name] = build_args[name]
            elif default == "\0":
                values[name] = global_values.get(name, "")
            else:
                values[name] = expand(default, values)
    return values


def image_env(stage: Stage, base_env: Mapping[str, str]) -> dict[str, str]:
    env = dict(base_env)
    for instruction in stage.all("ENV"):
        for name, value in _pairs(instruction.args):
            env[name] = expand(value, env)
    return env


def base_image(dockerfile: Dockerfile, stage: Stage, build_args: Mapping[str, str]) -> str:
    values = {name: default for i in dockerfile.global_args for name, default in _pairs(i.args)}
    return expand(stage.base, {**values, **build_args})


def exposed_ports(stage: Stage) -> set[int]:
    return {int(p.split("/")[0]) for i in stage.all("EXPOSE") for p in i.args.split()}


def user_ids(stage: Stage) -> tuple[int, int]:
    """USER as numbers (Kubernetes' runAsNonRoot can only verify a numeric user)."""
    instruction = stage.last("USER")
    if instruction is None:
        raise ReplayError("no USER: the image would run as root")
    uid, _, gid = instruction.args.partition(":")
    if not uid.isdigit() or (gid and not gid.isdigit()):
        raise ReplayError(f"line {instruction.line}: USER {instruction.args} is not numeric")
    return int(uid), int(gid or uid)


def venv_run(stage: Stage) -> Instruction:
    found = [i for i in stage.all("RUN") if re.search(r"install\.sh\s+venv\s", i.args)]
    if len(found) != 1:
        raise ReplayError(f"stage {stage.name}: want one RUN of install.sh venv, found {len(found)}")
    return found[0]


def built_stage(dockerfile: Dockerfile) -> tuple[Stage, list[str]]:
    """The stage the final one copies from, and the in-image paths it copies (the image's own roots)."""
    copies = [i for i in dockerfile.final.all("COPY") if "from" in i.flags]
    if not copies or any(c.flags["from"] != copies[0].flags["from"] for c in copies):
        raise ReplayError("the final stage must COPY --from one build stage")
    if [i for i in dockerfile.final.all("COPY") + dockerfile.final.all("ADD") if "from" not in i.flags]:
        raise ReplayError("the final stage copies from the build context: only COPY --from the build stage")
    return dockerfile.stage(copies[0].flags["from"]), [c.args.split()[-1] for c in copies]


@dataclass
class Image:
    """What `docker build` and `docker run` would take from a Dockerfile."""

    dockerfile: Dockerfile
    build_args: dict[str, str]
    build_stage: Stage
    roots: list[str]
    entrypoint: list[str]
    cmd: list[str]
    health: Healthcheck
    user: tuple[int, int]
    workdir: str
    exposed: set[int]

    @classmethod
    def load(cls, path: Path, build_args: Mapping[str, str]) -> Image:
        dockerfile = parse_dockerfile(path.read_text())
        final = dockerfile.final
        build_stage, roots = built_stage(dockerfile)
        venv_run(build_stage)
        workdir = final.last("WORKDIR")
        return cls(
            dockerfile,
            dict(build_args),
            build_stage,
            roots,
            exec_form(final.last("ENTRYPOINT"), "ENTRYPOINT"),
            exec_form(final.last("CMD"), "CMD") if final.last("CMD") else [],
            healthcheck(final),
            user_ids(final),
            workdir.args if workdir else "/",
            exposed_ports(final),
        )


# ----------------------------------------------------------------------------------------------------------
# Build: the context and the venv step


def dockerignore_rules(context: Path) -> list[tuple[bool, list[str]]]:
    """(exclude?, pattern segments) for each line of .dockerignore."""
    path = context / ".dockerignore"
    rules = []
    for line in path.read_text().splitlines() if path.exists() else []:
        line = line.strip()
        if line and not line.startswith("#"):
            exclude = not line.startswith("!")
            rules.append((exclude, line.lstrip("!").strip("/").split("/")))
    return rules


def _matches(pattern: list[str], parts: list[str]) -> bool:
    """Whether a path or one of its parent directories matches (so `src` covers src/a/b.py); `**` is any
    number of directories, `*` stays within one."""
    if not pattern:
        return True  # the pattern matched a parent directory
    if pattern[0] == "**":
        return any(_matches(pattern[1:], parts[i:]) for i in range(len(parts) + 1))
    return bool(parts) and fnmatch.fnmatchcase(parts[0], pattern[0]) and _matches(pattern[1:], parts[1:])


def ignored(relative: str, rules: list[tuple[bool, list[str]]]) -> bool:
    result = False
    for exclude, pattern in rules:  # the last rule that matches decides, as Docker's
        if _matches(pattern, relative.split("/")):
            result = exclude
    return result


def copy_context(source: Path, target: Path) -> int:
    """The build context Docker would send: the tree less what .dockerignore excludes. The number of files."""
    rules = dockerignore_rules(source)
    count = 0
    for directory, dirnames, filenames in os.walk(source):
        relative_dir = Path(directory).relative_to(source)
        dirnames[:] = [d for d in dirnames if not _pruned(str(relative_dir / d), rules)]
        for name in filenames:
            relative = str(relative_dir / name).removeprefix("./")
            if not ignored(relative, rules):
                (target / relative).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source / relative, target / relative)
                count += 1
    return count


def _pruned(relative: str, rules: list[tuple[bool, list[str]]]) -> bool:
    """A directory to skip: ignored, and no `!` rule could bring back something under it."""
    relative = relative.removeprefix("./")
    if not ignored(relative, rules):
        return False
    parts = relative.split("/")
    for exclude, pattern in rules:
        if not exclude and fnmatch.fnmatchcase("/".join(parts), "/".join(pattern[: len(parts)])):
            return False
    return True


class PathMap:
    """In-image absolute paths -> their place in the replay directory."""

    def __init__(self, mapping: Mapping[str, Path]) -> None:
        self.mapping = dict(sorted(mapping.items(), key=lambda item: -len(item[0])))
        roots = "|".join(re.escape(root) for root in self.mapping)
        self.pattern = re.compile(rf"(?<![\w./-])({roots})(?=/|$|[\s\"':;,])")

    def __call__(self, text: str) -> str:
        return self.pattern.sub(lambda m: str(self.mapping[m.group(1)]), text)


def replay_venv_step(image: Image, work: Path, python: str, dry_run: Path | None) -> float:
    """Runs the build stage's `install.sh venv` RUN line as /bin/sh -c would, in the replay directory."""
    run = venv_run(image.build_stage)
    context = work / "context"
    mapping: dict[str, Path] = {root: work / root.lstrip("/") for root in image.roots}
    for mount in run.mounts:
        if mount.get("type", "bind") == "bind":
            mapping[mount["target"]] = context / mount.get("source", ".")
    command = PathMap(mapping)(run.args)
    # The base image's python3, whatever python3 is first on this PATH.
    shim = work / "bin"
    shim.mkdir(exist_ok=True)
    (shim / "python3").symlink_to(python)
    env = {**os.environ, **stage_args(image.dockerfile, image.build_stage, image.build_args)}
    env["PATH"] = f"{shim}{os.pathsep}{env.get('PATH', '')}"
    if dry_run is not None:
        env["INSTALL_DRY_RUN"] = str(dry_run)
        # PyPI alone, as in a docker build: no find-links or extra indexes of this host.
        env = {k: v for k, v in env.items() if not k.startswith("PIP_") or k == "PIP_CERT"}
        env["PIP_CONFIG_FILE"] = os.devnull
    print(f"replay: RUN (line {run.line}) {command}", flush=True)
    started = time.monotonic()
    result = subprocess.run(["/bin/sh", "-c", command], env=env, cwd=work)
    if result.returncode != 0:
        raise ReplayError(f"the venv step failed with exit code {result.returncode}")
    return time.monotonic() - started


def report_skipped_steps(image: Image) -> None:
    for stage in image.dockerfile.stages:
        for run in stage.all("RUN"):
            if run is not venv_run(image.build_stage):
                print(f"replay: not replayed (system step, stage {stage.name}): RUN {run.args}", flush=True)


# ----------------------------------------------------------------------------------------------------------
# Run: the container's process, in a network namespace of its own


@dataclass
class Plan:
    """What the sandbox runs; JSON between the replay and its `unshare`d copy."""

    entrypoint: list[str]
    cmd: list[str]
    health: list[str]
    health_timeout_s: float
    wait_s: float
    env: dict[str, str]
    workdir: str
    user: list[int] | None  # [uid, gid], when running as root
    models: list[str]  # the bundled examples: all must be ready
    sagemaker_model_dir: str
    log_dir: str
    host_network: bool = False  # no network namespace: free ports passed as flags


def as_user(user: list[int] | tuple[int, int] | None) -> dict[str, object]:
    """subprocess arguments that run a command as `user` (uid, gid) with no other groups; {}: as this process."""
    return {"user": user[0], "group": user[1], "extra_groups": []} if user else {}


def die_with_parent() -> Callable[[], None]:
    """A preexec_fn: SIGKILL when the parent dies, so that no server outlives a replay that was killed. libc is
    loaded here, in the parent: the child may have switched to a user who cannot read this Python's files."""
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    pr_set_pdeathsig = 1
    return lambda: prctl(pr_set_pdeathsig, signal.SIGKILL)


def _http(port: int, path: str, body: bytes | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=body, method="POST" if body else "GET"
    )
    if body:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return True
    except OSError:
        return False


INFER_BODY = json.dumps(
    {
        "inputs": [
            {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": list(range(16))},
            {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [1] * 16},
        ]
    }
).encode()


def check_simple_answer(status: int, body: bytes, where: str) -> None:
    if status != 200:
        raise ReplayError(f"{where}: HTTP {status}: {body[:500]!r}")
    outputs = {o["name"]: o["data"] for o in json.loads(body)["outputs"]}
    expected = {
        "OUTPUT0": [i + 1 for i in range(16)],
        "OUTPUT1": [i - 1 for i in range(16)],
    }  # sum, difference
    if outputs != expected:
        raise ReplayError(f"{where}: wrong answer {outputs}")


class Container:
    """The image's main process, started as `docker run` would start it."""

    def __init__(self, plan: Plan, name: str, args: list[str], env: Mapping[str, str]) -> None:
        self.plan = plan
        self.name = name
        self.env = {**plan.env, **env}
        self.log = Path(plan.log_dir) / f"{name}.log"
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [*plan.entrypoint, *args],
                env=self.env,
                cwd=plan.workdir,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent(),  # set after the user switch, so that it stays
                **as_user(plan.user),  # type: ignore[arg-type]
            )

    def fail(self, message: str) -> ReplayError:
        return ReplayError(
            f"{self.name}: {message}\n--- server log ---\n{self.log.read_text(errors='replace')}"
        )

    def wait_healthy(self) -> float:
        """Runs the HEALTHCHECK command (as Docker does, with the container's environment and user) every
        second until it passes; the seconds that took."""
        started = time.monotonic()
        env = {**self.env, "MODELHOST_HEALTHCHECK_PID": str(self.process.pid)}
        while time.monotonic() - started < self.plan.wait_s:
            if self.process.poll() is not None:
                raise self.fail(f"exited with {self.process.returncode} before it was healthy")
            try:
                check = subprocess.run(
                    self.plan.health,
                    env=env,
                    cwd=self.plan.workdir,
                    capture_output=True,
                    timeout=self.plan.health_timeout_s,
                    **as_user(self.plan.user),  # type: ignore[arg-type]
                )
                if check.returncode == 0:
                    return time.monotonic() - started
            except subprocess.TimeoutExpired:
                pass
            time.sleep(1)
        raise self.fail(f"HEALTHCHECK did not pass in {self.plan.wait_s:.0f} s")

    def stop(self) -> int:
        """`docker stop`: SIGTERM, then SIGKILL after the grace period."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise self.fail(f"did not stop in {STOP_TIMEOUT_S:.0f} s after SIGTERM") from None


def run_default(plan: Plan, ports: dict[str, int]) -> dict[str, object]:
    """`docker run IMAGE`: the bundled examples on 8000/8001/8002."""
    args = list(plan.cmd)
    if plan.host_network:  # `docker run IMAGE --http-port=...`: CMD replaced, the entrypoint's `-...` branch
        args = [f"--{kind}-port={ports[kind]}" for kind in ("http", "grpc", "metrics")]
    container = Container(plan, "default", args, {})
    try:
        healthy_s = container.wait_healthy()
        status, body = _http(ports["http"], "/v2/repository/index", b"{}")
        states = {m["name"]: m.get("state") for m in json.loads(body)} if status == 200 else {}
        not_ready = sorted(m for m in plan.models if states.get(m) != "READY")
        if not_ready:
            raise container.fail(f"bundled models not ready: {not_ready} (index: {states})")
        closed = [kind for kind in ("http", "grpc", "metrics") if not _listening(ports[kind])]
        if closed:
            raise container.fail(f"not listening: {closed}")
        check_simple_answer(*_http(ports["http"], "/v2/models/simple/infer", INFER_BODY), "infer simple")
        status, metrics = _http(ports["metrics"], "/metrics")
        if status != 200 or b'nv_inference_request_success{model="simple"' not in metrics:
            raise container.fail("/metrics does not count the inference on simple")
    finally:
        code = container.stop()
    if code != 0:
        raise container.fail(f"exit code {code} after SIGTERM")
    print(f"replay: default: healthy after {healthy_s:.1f} s, {len(states)} models ready, simple answered")
    ready = sorted(name for name, state in states.items() if state == "READY")
    return {"healthy_s": round(healthy_s, 1), "models_ready": ready, "exit_code": code}


def run_sagemaker(plan: Plan, ports: dict[str, int]) -> dict[str, object]:
    """`docker run IMAGE serve`, as SageMaker starts it: /opt/ml/model holds `simple`."""
    env = {
        "SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "simple",
        "MODELHOST_SAGEMAKER_MODEL_DIR": plan.sagemaker_model_dir,
    }
    if plan.host_network:
        env["SAGEMAKER_BIND_TO_PORT"] = str(ports["sagemaker"])
    container = Container(plan, "sagemaker", ["serve"], env)
    try:
        healthy_s = container.wait_healthy()
        status, _ = _http(ports["sagemaker"], "/ping")
        if status != 200:
            raise container.fail(f"/ping answered {status}")
        check_simple_answer(*_http(ports["sagemaker"], "/invocations", INFER_BODY), "POST /invocations")
        if not plan.host_network and _listening(ports["http"]):
            raise container.fail("the HTTP port listens: `serve` did not run the SageMaker entry")
    finally:
        code = container.stop()
    if code != 0:
        raise container.fail(f"exit code {code} after SIGTERM")
    print(f"replay: serve (SageMaker): healthy after {healthy_s:.1f} s, /ping 200, /invocations answered")
    return {"healthy_s": round(healthy_s, 1), "exit_code": code}


# KServe's Triton runtime's container args (deploy/schemas/reference/kserve-tritonserver.yaml; the image test
# compares them), with its /mnt/models: the swap of its image for modelhost's is the whole migration.
KSERVE_ARGS = ["tritonserver", "--model-store=/mnt/models", "--grpc-port=9000", "--http-port=8080",
               "--allow-grpc=true", "--allow-http=true"]  # fmt: skip


def run_kserve(plan: Plan, ports: dict[str, int]) -> dict[str, object]:
    """`tritonserver ...` as KServe's Triton runtime runs it (its container args after the image's entrypoint),
    serving the model directory SageMaker's run uses (`simple`) as /mnt/models."""
    http_port, grpc_port = (ports["kserve_http"], ports["kserve_grpc"]) if plan.host_network else (8080, 9000)
    replaced = {
        "--model-store": plan.sagemaker_model_dir,
        "--http-port": str(http_port),
        "--grpc-port": str(grpc_port),
    }
    args = []
    for arg in KSERVE_ARGS:
        name = arg.split("=", 1)[0]
        args.append(f"{name}={replaced[name]}" if name in replaced else arg)
    if plan.host_network:  # the metrics port too, which the runtime leaves at 8002
        args.append(f"--metrics-port={ports['kserve_metrics']}")
    container = Container(plan, "kserve", args, {})
    try:
        healthy_s = container.wait_healthy()
        check_simple_answer(*_http(http_port, "/v2/models/simple/infer", INFER_BODY), "tritonserver infer")
        if not _listening(grpc_port):
            raise container.fail(f"gRPC is not listening on {grpc_port}")
    finally:
        code = container.stop()
    if code != 0:
        raise container.fail(f"exit code {code} after SIGTERM")
    print(f"replay: tritonserver (KServe runtime args): healthy after {healthy_s:.1f} s, simple answered")
    return {"healthy_s": round(healthy_s, 1), "exit_code": code, "args": KSERVE_ARGS}


def loopback_up() -> None:
    """A new network namespace has its loopback down."""
    import fcntl
    import struct

    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(s, siocgifflags, request)[:18])[1]
        fcntl.ioctl(s, siocsifflags, struct.pack("16sH", b"lo", flags | iff_up))


def run_plan(plan: Plan) -> dict[str, object]:
    if plan.host_network:
        names = [*DEFAULT_PORTS, "kserve_http", "kserve_grpc", "kserve_metrics"]
        ports = dict(zip(names, _free_ports(len(names)), strict=True))
    else:
        loopback_up()
        ports = dict(DEFAULT_PORTS)
    return {
        "default": run_default(plan, ports),
        "sagemaker": run_sagemaker(plan, ports),
        "kserve": run_kserve(plan, ports),
    }


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


def namespace_prefix() -> list[str] | None:
    """`unshare` for a private network namespace (a user namespace too when not root), if it works here."""
    command = ["unshare", "--net"] if os.geteuid() == 0 else ["unshare", "--map-root-user", "--net"]
    try:
        probe = subprocess.run([*command, "true"], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return command if probe.returncode == 0 else None


# ----------------------------------------------------------------------------------------------------------
# The replay


def make_plan(image: Image, work: Path, host_network: bool, run_as_user: bool) -> Plan:
    mapping = {root: work / root.lstrip("/") for root in [*image.roots, image.workdir]}
    to_replay = PathMap(mapping)
    home = work / image.workdir.lstrip("/")
    home.mkdir(parents=True, exist_ok=True)
    # A container's environment: the base image's (PATH; here this host's), HOME of the USER, then ENV.
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": image.workdir, "LANG": "C.UTF-8"}
    env = {name: to_replay(value) for name, value in image_env(image.dockerfile.final, base).items()}
    python = to_replay(image.roots[0]) + "/bin/python"
    examples = Path(
        subprocess.run(
            [python, "-c", "from modelhost.cli.main import bundled_examples; print(bundled_examples())"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    model_dir = work / "opt/ml/model"
    shutil.copytree(examples / "simple", model_dir / "simple")
    logs = work / "logs"
    logs.mkdir()
    user = None
    if run_as_user:  # the image's USER
        user = list(image.user)
        os.chown(home, *image.user)
        os.chown(logs, *image.user)
        work.chmod(0o755)  # mkdtemp's 0700: the USER must reach the venv
    return Plan(
        entrypoint=[to_replay(a) for a in image.entrypoint],
        cmd=[to_replay(a) for a in image.cmd],
        health=[to_replay(a) for a in image.health.command],
        health_timeout_s=image.health.timeout_s,
        wait_s=image.health.start_period_s + image.health.interval_s * image.health.retries,
        env=env,
        workdir=str(home),
        user=user,
        models=sorted(p.name for p in examples.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))),
        sagemaker_model_dir=str(model_dir),
        log_dir=str(logs),
        host_network=host_network,
    )


IMAGE_PYTHONS = {"ubuntu24.04": "3.12", "ubuntu22.04": "3.10"}  # python3 of the distribution bases


def image_python_version(base: str) -> str | None:
    if match := re.match(r"(?:docker\.io/)?(?:library/)?python:(\d+\.\d+)", base):
        return match.group(1)
    return next((version for tag, version in IMAGE_PYTHONS.items() if tag in base), None)


def runs_as(python: str, user: tuple[int, int] | None) -> bool:
    """Whether `python` can make a venv, run as `user` (None: as this process)."""
    try:
        command = [python, "-c", "import ensurepip, venv"]
        probe = subprocess.run(command, capture_output=True, timeout=30, **as_user(user))  # type: ignore[arg-type]
    except (OSError, subprocess.SubprocessError):
        return False
    return probe.returncode == 0


def choose_python(image: Image, given: str | None) -> tuple[str, bool]:
    """The interpreter standing for the image's python3: --python, else one of the image's version, else this
    one; and whether the server can run as the image's USER with it (only root can switch users, and an
    interpreter under /root is out of the USER's reach)."""
    if given:
        candidates = [given]
    else:
        version = image_python_version(base_image(image.dockerfile, image.build_stage, image.build_args))
        names = [f"/usr/local/bin/python{version}", f"/usr/bin/python{version}"] if version else []
        candidates = [*names, shutil.which(f"python{version}") if version else None, sys.executable]
    found = [c for c in dict.fromkeys(candidates) if c and os.access(c, os.X_OK)]
    if os.geteuid() == 0:
        for python in found:
            if runs_as(python, image.user):
                return python, True
    for python in found:
        if runs_as(python, None):
            return python, False
    raise ReplayError(f"no Python interpreter that can make a venv among {candidates}")


def check_image(image: Image) -> None:
    missing = set(DEFAULT_PORTS.values()) - image.exposed
    if missing:
        raise ReplayError(f"EXPOSE lacks {sorted(missing)}")
    if image.user[0] == 0:
        raise ReplayError("USER is root")


def resolve_report(report_path: Path) -> dict[str, object]:
    report = json.loads(report_path.read_text())
    versions = {item["metadata"]["name"].lower(): item["metadata"]["version"] for item in report["install"]}
    print(
        f"replay: resolved {len(versions)} distributions: torch {versions.get('torch')}, "
        f"onnxruntime-gpu {versions.get('onnxruntime-gpu')}, tensorrt {versions.get('tensorrt')}"
    )
    return {"distributions": versions}


def replay(args: argparse.Namespace) -> dict[str, object]:
    build_args = dict(arg.partition("=")[::2] for arg in args.build_arg)
    image = Image.load(args.dockerfile, build_args)
    check_image(image)
    summary: dict[str, object] = {
        "dockerfile": str(args.dockerfile),
        "base": base_image(image.dockerfile, image.dockerfile.final, build_args),
        "build_args": stage_args(image.dockerfile, image.build_stage, build_args),
        "entrypoint": image.entrypoint,
        "cmd": image.cmd,
        "healthcheck": asdict(image.health),
        "user": list(image.user),
    }
    print(
        f"replay: {args.dockerfile}: FROM {summary['base']}, ENTRYPOINT {image.entrypoint}, CMD {image.cmd}"
    )
    if args.parse_only:
        return summary
    report_skipped_steps(image)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="modelhost-replay-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        files = copy_context(ROOT, work / "context")
        print(f"replay: build context: {files} files", flush=True)
        report = work / "resolution.json" if args.resolve_only else None
        python, as_user = choose_python(image, args.python)
        summary["python"] = python
        summary["install_s"] = round(replay_venv_step(image, work, python, report), 1)
        if report is not None:
            summary["resolution"] = resolve_report(report)
            return summary
        host_network = (prefix := namespace_prefix()) is None
        if not as_user:
            reason = "not root" if os.geteuid() else f"{python} is out of its reach"
            print(f"replay: the server runs as this user, not USER {image.user} ({reason})")
        plan = make_plan(image, work, host_network, as_user)
        summary["network_namespace"] = not host_network
        summary["ran_as_user"] = list(image.user) if as_user else None
        started = time.monotonic()
        summary["runs"] = run_sandboxed(plan, work, prefix)
        summary["run_s"] = round(time.monotonic() - started, 1)
        return summary
    finally:
        if not args.keep and not args.workdir:
            shutil.rmtree(work, ignore_errors=True)


def run_sandboxed(plan: Plan, work: Path, prefix: list[str] | None) -> dict[str, object]:
    if prefix is None:
        print("replay: no network namespace here (unshare failed): host network, free ports", flush=True)
        return run_plan(plan)
    plan_path, result_path = work / "plan.json", work / "runs.json"
    plan_path.write_text(json.dumps(asdict(plan)))
    command = [*prefix, sys.executable, __file__, "--sandbox", str(plan_path), str(result_path)]
    if subprocess.run(command, preexec_fn=die_with_parent()).returncode != 0:
        raise ReplayError("the run in the network namespace failed (above)")
    result: dict[str, object] = json.loads(result_path.read_text())
    return result


def sandbox(plan_path: str, result_path: str) -> int:
    try:
        result = run_plan(Plan(**json.loads(Path(plan_path).read_text())))
    except ReplayError as error:
        print(f"replay: FAILED: {error}", file=sys.stderr)
        return 1
    Path(result_path).write_text(json.dumps(result))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--sandbox"]:
        return sandbox(*argv[1:3])
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dockerfile", type=Path, default=ROOT / "deploy/docker/Dockerfile")
    parser.add_argument("--build-arg", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument(
        "--python", help="the interpreter for the image's python3 (default: one of its version)"
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--parse-only", action="store_true", help="check the Dockerfile alone")
    mode.add_argument("--resolve-only", action="store_true", help="resolve the venv step (pip --dry-run)")
    parser.add_argument("--workdir", help="replay here (kept) instead of a temporary directory")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument("--summary", type=Path, help="write what was checked, as JSON, to this file")
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        summary = replay(args)
    except (ReplayError, subprocess.CalledProcessError, OSError) as error:
        print(f"replay: FAILED: {error}", file=sys.stderr)
        return 1
    summary["total_s"] = round(time.monotonic() - started, 1)
    if args.summary:
        args.summary.write_text(json.dumps(summary, indent=2))
    print(f"replay: OK in {summary['total_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
