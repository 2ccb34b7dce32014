"""docs/cli.md's flag tables, from the flag table (a test checks that the page is current)."""

from __future__ import annotations

from modelhost.cli.flags import FLAGS, METAVARS, SECTIONS, Flag, Status


def flags_markdown() -> str:
    """The flag tables of docs/cli.md, one per section, from FLAGS."""
    out: list[str] = []
    for section in SECTIONS:
        out += [f"### {section}", "", "| Flag | Default | Status | Meaning |", "|---|---|---|---|"]
        for flag in (f for f in FLAGS if f.section == section):
            cells = (_md_flag(flag), _md_text(flag.default or "—"), _md_status(flag), _md_text(flag.help))
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def _md_flag(flag: Flag) -> str:
    usage = flag.option if flag.kind == "switch" else f"{flag.option}={flag.metavar or METAVARS[flag.kind]}"
    # In a table, a pipe must be escaped even inside a code span.
    return f"`{usage}`".replace("|", "\\|") + (" (repeatable)" if flag.repeatable else "")


def _md_status(flag: Flag) -> str:
    if flag.status is Status.IGNORED:
        return f"ignored: {_md_text(flag.note)}"
    if flag.status is Status.REFUSED:
        accepted = ", ".join(f"`{value}`" for value in flag.accepted)
        return f"not supported yet: {_md_text(flag.note)}" + (f" (accepted: {accepted})" if accepted else "")
    return "**honoured**"


def _md_text(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
