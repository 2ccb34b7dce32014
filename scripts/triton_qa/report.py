"""The summary of a run, as markdown and JSON: per suite and configuration, the tests run, passed, failed,
skipped, errored and expected to fail (another issue), each failure's id and the first lines of its message,
what was left out and why, and the total "N of M tests pass"."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from triton_qa.core import OUTCOMES, ConfigResult, LeftOut, SuiteResult, TestResult, short_message


def totals(suites: Sequence[SuiteResult]) -> dict[str, int]:
    c = dict.fromkeys(OUTCOMES, 0)
    for s in suites:
        for k, v in s.counts().items():
            c[k] += v
    return c


def pass_line(c: dict[str, int]) -> str:
    """ "N of M tests pass": M counts every test that ran (not those that skipped themselves)."""
    ran = c["passed"] + c["failed"] + c["errored"] + c["known"]
    return (
        f"{c['passed']} of {ran} tests pass ({c['failed']} failed, {c['errored']} errored, "
        f"{c['known']} expected failures of other issues; {c['skipped']} skipped by the tests themselves)"
    )


def to_json(suites: Sequence[SuiteResult], meta: dict[str, Any]) -> dict[str, Any]:
    c = totals(suites)
    ran = c["passed"] + c["failed"] + c["errored"] + c["known"]
    return {
        **meta,
        "total": {**c, "ran": ran},
        "summary": pass_line(c),
        "suites": [s.to_json() for s in suites],
    }


def suite_from_json(d: dict[str, Any]) -> SuiteResult:
    s = SuiteResult(d["name"], seconds=d.get("seconds", 0.0), error=d.get("error", ""))
    s.notes = list(d.get("notes", []))
    s.left_out = [LeftOut(x["what"], x["category"], x.get("reason", "")) for x in d.get("left_out", [])]
    for c in d.get("configs", []):
        cr = ConfigResult(
            c["suite"],
            c["name"],
            list(c.get("server_args", [])),
            seconds=c.get("seconds", 0.0),
            note=c.get("note", ""),
            server_log=c.get("server_log", ""),
        )
        cr.results = [
            TestResult(r["id"], r["outcome"], r.get("message", ""), r.get("reason", "")) for r in c["results"]
        ]
        s.configs.append(cr)
    return s


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _block(text: str, lines: int = 6) -> list[str]:
    msg = short_message(text, lines)
    if not msg:
        return []
    return ["    ```", *("    " + line[:300] for line in msg.splitlines()), "    ```"]


def to_markdown(suites: Sequence[SuiteResult], meta: dict[str, Any], notes: Sequence[str] = ()) -> str:
    c = totals(suites)
    out: list[str] = ["# Triton qa suites against modelhost", ""]
    out.append(f"**{pass_line(c)}.**")
    out.append("")
    for k in ("triton", "started", "seconds", "command"):
        if k in meta:
            out.append(f"- {k}: `{meta[k]}`")
    for n in notes:
        out.append(f"- {n}")
    out += [
        "",
        "| Suite | Configurations | Ran | Passed | Failed | Errored | Expected failures | Skipped | Time |",
    ]
    out.append("|---|---|---|---|---|---|---|---|---|")
    for s in suites:
        sc = s.counts()
        ran = sc["passed"] + sc["failed"] + sc["errored"] + sc["known"]
        out.append(
            f"| {s.name} | {len(s.configs)} | {ran} | {sc['passed']} | {sc['failed']} | {sc['errored']} | "
            f"{sc['known']} | {sc['skipped']} | {s.seconds / 60:.1f} min |"
        )
    out.append("")
    for s in suites:
        out += _suite_md(s)
    return "\n".join(out) + "\n"


def _suite_md(s: SuiteResult) -> list[str]:
    sc = s.counts()
    out = [f"## {s.name}", "", f"{pass_line(sc)}.", ""]
    if s.error:
        out += ["**The suite did not run:**", "", "```", s.error.strip(), "```", ""]
    for n in s.notes:
        out.append(f"- {n}")
    if s.notes:
        out.append("")
    if s.configs:
        out += [
            "| Configuration | Server flags | Ran | Passed | Failed | Errored | Expected | Skipped | Note |"
        ]
        out.append("|---|---|---|---|---|---|---|---|---|")
        for cfg in s.configs:
            cc = cfg.counts()
            ran = cc["passed"] + cc["failed"] + cc["errored"] + cc["known"]
            flags = " ".join(a for a in cfg.server_args if not a.startswith("--model-repository"))
            out.append(
                f"| {_md_escape(cfg.name)} | `{_md_escape(flags) or ' '}` | {ran} | {cc['passed']} | "
                f"{cc['failed']} | {cc['errored']} | {cc['known']} | {cc['skipped']} | {_md_escape(cfg.note)} |"
            )
        out.append("")
    failures = [(cfg, r) for cfg in s.configs for r in cfg.results if r.outcome in ("failed", "errored")]
    if failures:
        out += ["### Failures", ""]
        for cfg, r in failures:
            note = f" — {r.reason}" if r.reason else ""
            out.append(f"- `{r.id}` ({r.outcome}, configuration `{cfg.name}`){note}")
            out += _block(r.message)
        out.append("")
    known = [(cfg, r) for cfg in s.configs for r in cfg.results if r.outcome == "known"]
    if known:
        out += ["### Expected failures (other issues)", ""]
        for cfg, r in known:
            first = short_message(r.message, 1)
            out.append(
                f"- `{r.id}` (configuration `{cfg.name}`): {r.reason}"
                + (f" — `{first[:200]}`" if first else "")
            )
        out.append("")
    skipped = [(cfg, r) for cfg in s.configs for r in cfg.results if r.outcome == "skipped"]
    if skipped:
        out += ["### Skipped by the tests themselves", ""]
        for cfg, r in skipped:
            out.append(f"- `{r.id}` (configuration `{cfg.name}`): {_md_escape(r.message)[:200]}")
        out.append("")
    if s.left_out:
        out += ["### Left out", ""]
        for x in s.left_out:
            out.append(f"- {x.what}: {x.category}" + (f" ({x.reason})" if x.reason else ""))
        out.append("")
    return out


def write(out: Path, suites: Sequence[SuiteResult], meta: dict[str, Any], notes: Sequence[str] = ()) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(
        json.dumps(to_json(suites, {**meta, "notes": list(notes)}), indent=1) + "\n"
    )
    (out / "summary.md").write_text(to_markdown(suites, meta, notes))


def now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S %Z")
