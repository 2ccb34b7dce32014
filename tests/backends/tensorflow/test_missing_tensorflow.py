"""The backend module without TensorFlow's import: a missing TensorFlow names the extra to install, a present
one is imported only by the first load. These tests need no TensorFlow (the interpreters they start are told
it cannot be found, or never import it)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import importlib.util
    find_spec = importlib.util.find_spec
    importlib.util.find_spec = lambda name, *a: None if name == "tensorflow" else find_spec(name, *a)
    from tritonclient.grpc.model_config_pb2 import ModelConfig
    from modelhost.backends.registry import MissingExtra, backend_for
    config = ModelConfig(name="m", platform="tensorflow_savedmodel", backend="tensorflow")
    try:
        backend_for(config)
    except MissingExtra as e:
        print(e)
    print("imported:", "tensorflow" in __import__("sys").modules)
    """
)


def test_missing_tensorflow_names_the_extra() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.splitlines() == [
        "unable to load model 'm': the tensorflow backend needs the Python package 'tensorflow', which is not "
        "installed; install it with: pip install 'modelhost[tensorflow]'",
        "imported: False",
    ]


def test_importing_the_backend_does_not_import_tensorflow() -> None:
    # TensorFlow takes seconds to import: the first load pays for it, in its load thread, not the server's start.
    script = "import sys, modelhost.backends.tensorflow.backend; print('tensorflow' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "False"
