"""TensorFlow's process-wide thread pools: the first model loaded sizes them, a later one that asks for other
sizes is told in the log. Run in a fresh interpreter: a process records them once."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from .models import tf

SCRIPT = textwrap.dedent(
    """
    import logging, sys
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(levelname)s %(message)s")
    from modelhost.backends.tensorflow import runtime
    first = runtime.session_pools("a", intra=None, inter=3, default_intra=1, default_inter=2)
    again = runtime.session_pools("b", intra=2, inter=None, default_intra=5, default_inter=5)
    print("pools", first == again, first.intra, first.inter)
    runtime.tensorflow()
    """
)


def test_first_model_sizes_the_pools() -> None:
    assert tf is not None  # TensorFlow installed (else .models skipped this module)
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}  # the runtime sets its own
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120, check=True, env=env
    )
    lines = done.stdout.splitlines()
    assert "pools True 1 3" in lines
    assert (
        "INFO TensorFlow thread pools: intra-op 1, inter-op 3 threads (0: TensorFlow's choice), for every "
        "TensorFlow model of this process, set at the load of model 'a'"
    ) in lines
    assert (
        "WARNING model 'b': parameter 'TF_NUM_INTRA_THREADS' is 2, but TensorFlow's thread pools are per process and "
        "already run 1 threads (set at the load of model 'a'); the parameter has no effect"
    ) in lines
    # Only what the model asked for is compared: its defaults (5) are no request.
    assert not any("TF_NUM_INTER_THREADS" in line for line in lines)
    # The C++ runtime's INFO lines (CPU feature notices) are kept out of the server log.
    assert "cpu_feature_guard" not in done.stderr
