"""Triton's qa mock_llm (L0_http/generate_models), with one more output. Request parameters: REPETITION (default
1), DELAY (seconds before each response), FAIL_LAST (end with an error response instead of the bare final flag);
and GATE (not Triton's), a file path: every response after the first waits until that file exists (at most
GATE_WAIT_S, then the request ends with an error response), so that a test can see the first response arrive
while the model has not yet sent the next one.

Decoupled (the config's policy): STREAM true sends TEXT = PROMPT REPETITION times, STREAM false once; each
response also carries PARAMS, the request's parameters as JSON. A cancelled request (its client went away) stops
early and logs "mock_llm: cancelled after <k> of <n>". Not decoupled: one response, TEXT = PROMPT repeated
REPETITION times along axis 1; STREAM true is refused with an error response.
"""

import json
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils

GATE_WAIT_S = 60.0


class TritonPythonModel:
    def initialize(self, args):
        self.model_config = json.loads(args["model_config"])
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(self.model_config)

    def execute(self, requests):
        if self.decoupled:
            for request in requests:
                self.exec_decoupled(request)
            return None
        return [self.exec_one(request) for request in requests]

    @staticmethod
    def read(request):
        params = json.loads(request.parameters() or "{}")
        prompt = pb_utils.get_input_tensor_by_name(request, "PROMPT").as_numpy()
        stream = bool(pb_utils.get_input_tensor_by_name(request, "STREAM").as_numpy().flatten()[0])
        echo = pb_utils.Tensor(
            "PARAMS", np.array([json.dumps(params, sort_keys=True).encode()], dtype=np.object_)
        )
        return params, prompt, stream, echo

    def exec_one(self, request):
        params, prompt, stream, echo = self.read(request)
        if stream:
            return pb_utils.InferenceResponse(
                error=pb_utils.TritonError("STREAM only supported in decoupled mode")
            )
        text = pb_utils.Tensor("TEXT", np.repeat(prompt, int(params.get("REPETITION", 1)), axis=1))
        return pb_utils.InferenceResponse(output_tensors=[text, echo])

    @staticmethod
    def opened(gate):
        deadline = time.monotonic() + GATE_WAIT_S
        while not os.path.exists(gate):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def exec_decoupled(self, request):
        params, prompt, stream, echo = self.read(request)
        count = int(params.get("REPETITION", 1)) if stream else 1
        delay = float(params.get("DELAY", 0))
        gate = params.get("GATE")
        sender = request.get_response_sender()
        for sent in range(count):
            if request.is_cancelled():
                pb_utils.Logger.log_info(f"mock_llm: cancelled after {sent} of {count}")
                break
            if gate and sent > 0 and not self.opened(gate):
                error = pb_utils.InferenceResponse(
                    error=pb_utils.TritonError(f"GATE {gate} did not open within {GATE_WAIT_S} s")
                )
                sender.send(error, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                return
            time.sleep(delay)
            sender.send(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("TEXT", prompt), echo]))
        if params.get("FAIL_LAST", False):
            error = pb_utils.InferenceResponse(error=pb_utils.TritonError("An Error Occurred"))
            sender.send(error, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        else:
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
