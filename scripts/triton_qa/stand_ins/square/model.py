"""Stand-in for python_backend's examples/decoupled/square_model.py (square_int32), which L0_backend_python's
test.sh clones from GitHub: a decoupled model that, for IN = [n], sends n responses with OUT = [n] from a thread of
its own, then the final flag. Its finalize prints "Finalize invoked" and "Finalize complete..." (test.sh counts
them in the server log) after waiting for the response threads."""

import json
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(config):
            raise pb_utils.TritonModelException(
                f"the model `{args['model_name']}` needs a decoupled transaction policy"
            )
        self.inflight = 0
        self.lock = threading.Lock()

    def execute(self, requests):
        for request in requests:
            n = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            thread = threading.Thread(
                target=self._respond, args=(request.get_response_sender(), n), daemon=True
            )
            with self.lock:
                self.inflight += 1
            thread.start()
        return None

    def _respond(self, sender, n):
        for _ in range(int(n[0])):
            sender.send(
                pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor("OUT", np.array([n[0]], np.int32))]
                )
            )
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        with self.lock:
            self.inflight -= 1

    def finalize(self):
        print("Finalize invoked")
        while True:
            with self.lock:
                if self.inflight == 0:
                    break
            time.sleep(0.1)
        print("Finalize complete...")
