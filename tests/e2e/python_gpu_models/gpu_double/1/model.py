import numpy as np
import torch
import torch.utils.dlpack
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.device = torch.device("cuda", int(args["model_instance_device_id"]))

    def execute(self, requests):
        responses = []
        for request in requests:
            source = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            doubled = torch.from_dlpack(source.to_dlpack()).to(self.device) * 2
            out0 = pb_utils.Tensor.from_dlpack("OUTPUT0", doubled)
            out2 = pb_utils.Tensor.from_dlpack("OUTPUT2", torch.utils.dlpack.to_dlpack(doubled.clone()))
            try:
                out0.as_numpy()
                refused = 0
            except pb_utils.TritonModelException as e:
                refused = int("stored in GPU" in str(e))
            checks = np.array([source.is_cpu(), not out0.is_cpu() and not out2.is_cpu(), refused], np.int64)
            responses.append(pb_utils.InferenceResponse([out0, out2, pb_utils.Tensor("CHECKS", checks)]))
        return responses
