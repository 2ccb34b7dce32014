"""Doubles INPUT0, and refuses to initialise with a max_batch_size above 4: a model some of whose variants
cannot load, as models with a fixed batch dimension or a memory limit have."""

import json

import triton_python_backend_utils as pb_utils

LIMIT = 4


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        if config["max_batch_size"] > LIMIT:
            raise pb_utils.TritonModelException(
                f"batch_limited: max_batch_size {config['max_batch_size']} is above what this model supports ({LIMIT})"
            )

    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(
                pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT0", data * 2)])
            )
        return responses
