"""`modelhost tune`: Model Analyzer's job (find the configuration that serves a model best), in minutes.

See docs/tune.md. The parts: options (the command line), space (what varies, and the config a variant makes),
target (the server measured), measure (perf's load engine, in process), session (points within the time limit,
checkpointed), search (quick and brute), goal (constraints, objective, Pareto front), results (config, diff,
CSV), report (HTML), plots (PNG), progress (the live line), run (all of them in order).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from modelhost.tune.target import TuneError

ERROR = 1  # the run failed, or no configuration met the constraints
INTERRUPTED = 130


def main(argv: Sequence[str]) -> int:
    from modelhost.tune.options import parse_args

    try:
        options = parse_args(argv)
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else 0
    try:
        from modelhost.tune.run import run

        return run(options)
    except TuneError as error:
        sys.stdout.flush()
        print(f"modelhost tune: error: {error}", file=sys.stderr)
        return ERROR
    except KeyboardInterrupt:
        print("modelhost tune: interrupted; --resume continues from the last measurement", file=sys.stderr)
        return INTERRUPTED
