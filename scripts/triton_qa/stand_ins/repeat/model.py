"""Stand-in for Triton's C++ `repeat` test backend (triton-inference-server/repeat_backend, r24.09), as a python
model.

Inputs IN (INT32 [-1]), DELAY (UINT32, IN's shape) and WAIT (UINT32 [1]); outputs OUT (INT32 [1]) and IDX (UINT32
[1]). Decoupled: for the i'th element of IN, waits DELAY[i] ms then sends a response with OUT = IN[i] and IDX = i,
then the final flag; the request is released after WAIT ms, while the responses may still be going out (they
are sent from a thread of their own). Not decoupled: one response, for the first element. The runner copies
this file into models whose config says `backend: "repeat"`.
"""

import json
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        self.threads = []

    def _send(self, sender, values, delays):
        for i, (value, delay) in enumerate(zip(values, delays, strict=True)):
            time.sleep(int(delay) / 1000.0)
            sender.send(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("OUT", np.array([value], dtype=np.int32)),
                        pb_utils.Tensor("IDX", np.array([i], dtype=np.uint32)),
                    ]
                )
            )
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def execute(self, requests):
        if len(requests) > 1:
            raise pb_utils.TritonModelException("repeat backend does not support batched request execution")
        wait_ms = 0
        responses = []
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy().astype(np.int32).flatten()
            delays = (
                pb_utils.get_input_tensor_by_name(request, "DELAY").as_numpy().astype(np.uint32).flatten()
            )
            wait = pb_utils.get_input_tensor_by_name(request, "WAIT").as_numpy().flatten()
            wait_ms = int(wait[0]) if wait.size else 0
            error = None
            if wait.size != 1:
                error = "unexpected size for WAIT input"
            elif delays.shape != values.shape:
                error = (
                    f"expected IN and DELAY shape to match, got {list(values.shape)} and {list(delays.shape)}"
                )
            if self.decoupled:
                sender = request.get_response_sender()
                if error is not None:
                    sender.send(
                        pb_utils.InferenceResponse(error=pb_utils.TritonError(error)),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                    )
                    continue
                thread = threading.Thread(target=self._send, args=(sender, values, delays), daemon=True)
                thread.start()
                self.threads.append(thread)
            elif error is not None or values.size == 0:
                responses.append(
                    pb_utils.InferenceResponse(error=pb_utils.TritonError(error or "IN is empty"))
                )
            else:
                time.sleep(int(delays[0]) / 1000.0)
                responses.append(
                    pb_utils.InferenceResponse(
                        output_tensors=[
                            pb_utils.Tensor("OUT", values[:1].copy()),
                            pb_utils.Tensor("IDX", np.array([0], dtype=np.uint32)),
                        ]
                    )
                )
        time.sleep(wait_ms / 1000.0)
        self.threads = [t for t in self.threads if t.is_alive()]
        return None if self.decoupled else responses

    def finalize(self):
        for thread in self.threads:
            thread.join(timeout=30)
