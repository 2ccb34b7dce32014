"""OUTPUT0 = INPUT0 after a sleep of DELAY_MS milliseconds (the optional input, else the request parameter
"delay_ms", else 0). TIMES = [start, end] of the execution (time.time()), so a client can see overlap."""

import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.model_config = json.loads(args["model_config"])

    def execute(self, requests):
        responses = []
        for request in requests:
            start = time.time()
            delay = pb_utils.get_input_tensor_by_name(request, "DELAY_MS")
            if delay is not None:
                delay_ms = int(delay.as_numpy()[0])
            else:
                delay_ms = int(json.loads(request.parameters() or "{}").get("delay_ms", 0))
            time.sleep(delay_ms / 1000.0)
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            times = np.array([start, time.time()], dtype=np.float64)
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor("OUTPUT0", in_0), pb_utils.Tensor("TIMES", times)]
                )
            )
        return responses
