"""Fuzzing: hypothesis with a fixed seed (derandomize) so that CI runs the same examples every time.

`MODELHOST_FUZZ_EXAMPLES=N` sets the examples per test (default 200: about a minute in all on 2 cores); by hand,
run thousands with `MODELHOST_FUZZ_RANDOM=1` for new ones each time:

    MODELHOST_FUZZ_EXAMPLES=3000 MODELHOST_FUZZ_RANDOM=1 .venv/bin/python -m pytest tests/fuzz
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "fuzz",
    max_examples=int(os.environ.get("MODELHOST_FUZZ_EXAMPLES", "200")),
    derandomize=os.environ.get("MODELHOST_FUZZ_RANDOM", "") != "1",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    database=None,
    print_blob=True,
)
settings.load_profile("fuzz")
