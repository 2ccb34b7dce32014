"""Triton's classic python-backend example: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1."""

import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.model_config = model_config = json.loads(args["model_config"])
        output0_config = pb_utils.get_output_config_by_name(model_config, "OUTPUT0")
        output1_config = pb_utils.get_output_config_by_name(model_config, "OUTPUT1")
        self.output0_dtype = pb_utils.triton_string_to_numpy(output0_config["data_type"])
        self.output1_dtype = pb_utils.triton_string_to_numpy(output1_config["data_type"])

    def execute(self, requests):
        responses = []
        for request in requests:
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            in_1 = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            out_tensor_0 = pb_utils.Tensor("OUTPUT0", (in_0 + in_1).astype(self.output0_dtype))
            out_tensor_1 = pb_utils.Tensor("OUTPUT1", (in_0 - in_1).astype(self.output1_dtype))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out_tensor_0, out_tensor_1]))
        return responses

    def finalize(self):
        pb_utils.Logger.log_info("add_sub: finalize")
