import numpy as np
import torch
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            source = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            tensor = torch.from_dlpack(source)  # a pb_utils.Tensor is a DLPack producer itself
            on_gpu = np.array([int(not source.is_cpu() and tensor.is_cuda)], np.int64)
            result = pb_utils.Tensor.from_dlpack("OUTPUT0", tensor + 1)
            responses.append(pb_utils.InferenceResponse([result, pb_utils.Tensor("ON_GPU", on_gpu)]))
        return responses
