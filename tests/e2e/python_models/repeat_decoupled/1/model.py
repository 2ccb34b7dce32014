"""Triton's "repeat" example, simplified: one response per element of IN (OUT = IN[i], IDX = i), each after
DELAY[i] milliseconds, then the final flag alone. IN and DELAY of different lengths: one error response."""

import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.model_config = model_config = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(model_config):
            raise pb_utils.TritonModelException(
                "model can support only decoupled transaction policy; {} is not decoupled".format(
                    args["model_name"]
                )
            )

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            delays = pb_utils.get_input_tensor_by_name(request, "DELAY").as_numpy()
            if values.shape != delays.shape:
                error = pb_utils.TritonError(
                    f"expected IN and DELAY shape to match, got {list(values.shape)} and {list(delays.shape)}."
                )
                sender.send(
                    pb_utils.InferenceResponse(error=error),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )
                continue
            for idx, (value, delay) in enumerate(zip(values, delays, strict=True)):
                time.sleep(int(delay) / 1000.0)
                out = pb_utils.Tensor("OUT", np.array([value], dtype=np.int32))
                index = pb_utils.Tensor("IDX", np.array([idx], dtype=np.uint32))
                sender.send(pb_utils.InferenceResponse(output_tensors=[out, index]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
