"""Python models that hold a known number of MiB from initialize() on (parameter MIB), so that what each takes
is far above the noise of a server's own memory; parameter SLEEP_S makes each request take that long, and FAIL
(memory_error, oom_killed) makes initialize() fail as a load out of memory does."""

from __future__ import annotations

from pathlib import Path

HOLDER = """
import json
import os
import signal
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"]).get("parameters", {})
        setting = {key: value["string_value"] for key, value in parameters.items()}
        if setting.get("FAIL") == "memory_error":
            raise MemoryError("cannot allocate the weights")
        if setting.get("FAIL") == "oom_killed":
            os.kill(os.getpid(), signal.SIGKILL)
        # Touched, so that it is resident and not only reserved.
        self.weights = np.ones(int(setting.get("MIB", "1")) << 18, dtype=np.float32)
        self.sleep_s = float(setting.get("SLEEP_S", "0"))

    def execute(self, requests):
        time.sleep(self.sleep_s)
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())])
            for r in requests
        ]
"""


def write_holder(repo: Path, name: str, **setting: str) -> None:
    parameters = "".join(
        f'parameters {{ key: "{key}" value {{ string_value: "{value}" }} }}\n'
        for key, value in setting.items()
    )
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "model.py").write_text(HOLDER)
    (repo / name / "config.pbtxt").write_text(
        'backend: "python"\nmax_batch_size: 0\n'
        'input [ { name: "IN", data_type: TYPE_INT32, dims: [ 1 ] } ]\n'
        'output [ { name: "OUT", data_type: TYPE_INT32, dims: [ 1 ] } ]\n' + parameters
    )
