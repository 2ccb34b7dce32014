import numpy as np
import torch
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.device = torch.device("cuda", int(args["model_instance_device_id"]))
        self.preferred = pb_utils.PreferredMemory(pb_utils.TRITONSERVER_MEMORY_GPU, self.device.index)

    def execute(self, requests):
        responses = []
        for request in requests:
            source = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            on_device = torch.from_dlpack(source.to_dlpack()).to(self.device)
            call = pb_utils.InferenceRequest(
                model_name="gpu_inputs",
                requested_output_names=["OUTPUT0"],
                inputs=[pb_utils.Tensor.from_dlpack("INPUT0", on_device)],
                preferred_memory=self.preferred,
            )
            answer = call.exec()
            if answer.has_error():
                raise pb_utils.TritonModelException(answer.error().message())
            result = pb_utils.get_output_tensor_by_name(answer, "OUTPUT0")
            on_gpu = np.array([int(not result.is_cpu())], np.int64)
            outputs = [pb_utils.Tensor.from_dlpack("OUTPUT0", result), pb_utils.Tensor("ON_GPU", on_gpu)]
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
