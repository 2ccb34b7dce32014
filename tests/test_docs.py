"""The docs agree with the code: what they name exists, and what they say is missing is said where it is tested.

- Every `--flag` the docs name is a flag of a modelhost command (or of a named other tool), and a line that
  calls a server flag ignored or not supported names one that is.
- Every metric family the docs name is one the server exports, or one docs/compatibility.md marks as missing;
  a line that says a family is missing names one the server does not export.
- Every `/v2/...` path the docs name is routed by the HTTP endpoint.
- A section that says something is not supported (yet) or not implemented links docs/compatibility.md, whose
  states tests/e2e/test_compatibility.py checks against the code and a running server.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from modelhost.backends.tensorrt.convert import build_parser as convert_parser
from modelhost.cli.docs import flags_markdown
from modelhost.cli.flags import FLAGS_BY_NAME, Status
from modelhost.cli.ray import serve_parser as ray_serve_parser
from modelhost.cli.serve_args import serve_parser
from modelhost.compatibility.page import EVERY_METRIC, metric_items
from modelhost.compatibility.surface import State
from modelhost.frontends.http import routes
from modelhost.frontends.metrics import family_names
from modelhost.perf.options import build_parser as perf_parser
from modelhost.tune.options import build_parser as tune_parser

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "deploy").rglob("*.md"))]
HAND_WRITTEN = [p for p in DOCS if p.name != "compatibility.md"]
GENERATED_LINES = set(flags_markdown().splitlines())

# Flags of other tools the docs show (docker, trtexec, helm, kubectl, aws, deploy/docker/replay.py), and ways of
# naming a group of flags (`--log-*`) or a made-up one.
OTHER_TOOLS = {
    "--flag",
    "--http-p",
    "--log-",
    "--grpc-http2-",
    "--grpc-keepalive-",
    "--shm-size",
    "--force",
    "--inputIOFormats",
    "--saveEngine",
    "--minShapes",
    "--optShapes",
    "--maxShapes",
    # helm, kubectl (docs/deploy)
    "--set",
    "--create-namespace",
    "--from-literal",
    "--strict",
    "--watch",
    "--raw",
    "--rm",
    "--cli-input-json",
    "--cluster",
    "--services",
    "--name",
    "--type",
    "--value",
    "--endpoint-name",
    "--content-type",
    "--body",
    "--target-model",
    "--build-arg",
    # deploy/docker/replay.py
    "--dockerfile",
    "--parse-only",
    "--python",
    "--keep",
    "--resolve-only",
    "--gpus",
    # git (docs/triton-qa.md)
    "--depth",
    "--branch",
}
# perf_analyzer options docs/perf.md lists as not supported by `modelhost perf`.
PERF_ANALYZER_ONLY = {
    "--binary-search",
    "--collect-metrics",
    "--request-intervals",
    "--serial-sequences",
    "--service-kind",
    "--num-of-sequences",
    "--measurement-mode",
}

ABSENT = re.compile(r"(?i)\bnot (yet )?(supported|implemented)\b|\bnot yet\b(?! (executing|answered|sent))")
SAYS_NOT_YET = re.compile(r"(?i)\bnot supported yet\b|\bnot yet\b(?! (executing|answered|sent))")
FLAG = re.compile(r"(?<![\w-])--[a-z][A-Za-z0-9-]*")


def _without_code_and_quotes(text: str) -> str:
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"`[^`]*`", "``", text)
    return re.sub(r'"[^"\n]*"', '""', text)


def _sections(path: Path) -> Iterator[str]:
    """The file's sections, heading to heading, without the generated flag tables."""
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line not in GENERATED_LINES]
    section: list[str] = []
    for line in lines:
        if line.startswith("#") and section:
            yield "\n".join(section)
            section = []
        section.append(line)
    yield "\n".join(section)


def _lines() -> Iterator[tuple[Path, str]]:
    for path in HAND_WRITTEN:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line not in GENERATED_LINES:
                yield path, line


def _known_flags() -> set[str]:
    known = {f"--{name}" for name in FLAGS_BY_NAME}
    for parser in (serve_parser(), ray_serve_parser(), perf_parser(), tune_parser(), convert_parser()):
        known |= {option for action in parser._actions for option in action.option_strings}
    scripts = [*(ROOT / "benchmarks").glob("*.py"), ROOT / "scripts" / "triton_qa" / "cli.py"]
    for script in scripts:  # the benchmark scripts and tools the docs tell to run
        known |= set(re.findall(r"[\"'](--[a-z][a-z0-9-]*)[\"']", script.read_text(encoding="utf-8")))
    return known | {"--dry-run", "--version", "--help"}  # `modelhost sagemaker --dry-run`, the top parser's


def test_every_flag_named_exists() -> None:
    known = _known_flags() | OTHER_TOOLS | PERF_ANALYZER_ONLY
    unknown = {
        (path.relative_to(ROOT).as_posix(), flag)
        for path, line in _lines()
        for flag in FLAG.findall(line)
        if flag not in known
    }
    assert not unknown, sorted(unknown)


def test_a_flag_said_to_be_not_supported_yet_is() -> None:
    wrong = []
    for path, line in _lines():
        # `--flag` alone (not `--flag=value`: a value of a honoured flag may be the thing not supported).
        found = re.findall(r"(?<![\w-])--([a-z][a-z0-9-]*)(?![=\w-])", line)
        named = [FLAGS_BY_NAME[name] for name in found if name in FLAGS_BY_NAME]
        says_not_yet = SAYS_NOT_YET.search(_without_code_and_quotes(line))
        if named and says_not_yet and not any(flag.status is Status.REFUSED for flag in named):
            wrong.append((path.name, line))
    assert not wrong, wrong


def _families_named(line: str) -> list[str]:
    """The metric families a line names; `nv_x_{a,b}_us` stands for two, and prefixes (`nv_cache_*`) for none."""
    names = []
    for m in re.finditer(r"\bnv_[a-z0-9_]*(?:\{[a-z0-9_]+(?:,[a-z0-9_]+)+\}[a-z0-9_]*)?", line):
        token = m.group(0)
        if token.endswith("_") or line[m.end() : m.end() + 1] == "*":
            continue
        braces = re.search(r"\{([a-z0-9_,]+)\}", token)
        if braces:
            names += [
                token[: braces.start()] + part + token[braces.end() :] for part in braces.group(1).split(",")
            ]
        else:
            names.append(token)
    return names


def test_every_metric_family_named_exists_or_is_marked_missing() -> None:
    exported = set(family_names(EVERY_METRIC, cpu=True, gpu=True, cache=True))
    missing = {item.name for item in metric_items() if item.state in (State.NOT_YET, State.NOT_PLANNED)}
    problems = []
    for path, line in _lines():
        for family in _families_named(line):
            if family in ("nv_log_gamma", "nv_delay", "nv_count"):
                continue  # a python model's own metrics, in an example
            if family not in exported | missing:
                problems.append((path.name, family))
            elif ABSENT.search(_without_code_and_quotes(line)) and family in exported:
                problems.append((path.name, f"{family} said to be missing: {line}"))
    assert not problems, problems


def _routed(path: str) -> bool:
    """Some route of the HTTP table serves the path (with some method)."""
    return routes._ROUTER.match("GET", path) is not None


def _concrete(template: str) -> list[str]:
    """`/v2/models[/{m}[/versions/{v}]]/stats` -> the paths it stands for (optional parts left out, and all in),
    placeholders filled in."""
    filled = re.sub(r"\{[^}]*\}|<[^>]*>", "x", template)
    shortest = filled
    while re.search(r"\[[^\[\]]*\]", shortest):
        shortest = re.sub(r"\[[^\[\]]*\]", "", shortest)
    longest = filled.replace("[", "").replace("]", "")
    return [p.replace("/versions/x", "/versions/1").rstrip("/") or "/v2" for p in (shortest, longest)]


def test_every_endpoint_named_is_routed() -> None:
    unrouted = []
    for path, line in _lines():
        for m in re.finditer(r"/v2(?:/[A-Za-z0-9_{}<>\[\]/.:-]*)?", line):
            if "..." in m.group(0):
                continue  # a family of paths (`/v2/repository/{r}/...`)
            template = m.group(0).rstrip(".:")
            for concrete in _concrete(template):
                if not _routed(concrete):
                    unrouted.append((path.name, template))
    assert not unrouted, unrouted


@pytest.mark.parametrize("path", HAND_WRITTEN, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_sections_saying_something_is_missing_link_the_compatibility_page(path: Path) -> None:
    for section in _sections(path):
        if ABSENT.search(_without_code_and_quotes(section)):
            assert "compatibility.md" in section, (
                f"{path.name}: this section says something is missing:\n{section}"
            )
