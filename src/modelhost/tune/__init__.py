"""`modelhost tune`: Model Analyzer's job (find the configuration that serves a model best), in minutes.

See docs/tune.md. The parts: options (the command line), space (what varies, and the config a variant makes),
target (the server measured), measure (perf's load engine, in process), session (points within the time limit,
checkpointed), search (quick and brute), goal (constraints, objective, Pareto front), results (config, diff,
CSV), report (HTML: figure_data, what it and the PNGs show; svg_plots, its plots), plots (PNG), progress (the
live line), run (all of them in order).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from modelhost.perf.command import run_command
from modelhost.tune.target import TuneError

if TYPE_CHECKING:
    from modelhost.tune.options import TuneOptions


def main(argv: Sequence[str]) -> int:
    """`modelhost tune ARGV`; bad flags exit with argparse's code 2 and message, a failed run (or one where no
    configuration met the constraints) with 1, Ctrl-C with 130 (after writing what was measured)."""
    from modelhost.tune.options import parse_args

    return run_command(
        "modelhost tune",
        argv,
        parse_args,
        _run,
        TuneError,
        interrupted="interrupted; --resume continues from the last measurement",
    )


def _run(options: TuneOptions) -> int:
    from modelhost.tune.run import run

    return run(options)
