"""Identity that counts its instances' initialize and finalize calls in files of the directory named by its
`count_dir` parameter, and waits in initialize while a file `hold_initialize` exists there (a gate the test opens,
instead of a sleep)."""

import fcntl
import json
import os
import time

import triton_python_backend_utils as pb_utils


def _bump(directory, kind):
    path = os.path.join(directory, kind)
    with open(path, "a+", encoding="utf-8") as f:
        fcntl.lockf(f, fcntl.LOCK_EX)
        f.seek(0)
        count = int(f.read() or "0") + 1
        f.seek(0)
        f.truncate()
        f.write(str(count))


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.directory = config["parameters"]["count_dir"]["string_value"]
        while os.path.exists(os.path.join(self.directory, "hold_initialize")):
            time.sleep(0.05)
        _bump(self.directory, "initialize")

    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)]))
        return responses

    def finalize(self):
        _bump(self.directory, "finalize")
