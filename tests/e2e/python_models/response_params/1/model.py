"""OUTPUT0 = INPUT0, and response parameters of every type pb_utils takes: `tag` echoes the request's parameter
`tag`, `count` is INPUT0's element count, `doubled` is true. Decoupled (the config's policy): two such responses,
`index` 0 and 1, then the final flag."""

import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(json.loads(args["model_config"]))

    def response(self, request, **more):
        values = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
        parameters = {
            "tag": json.loads(request.parameters()).get("tag", ""),
            "count": int(values.size),
            "doubled": True,
            **more,
        }
        return pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", values)], parameters=parameters)

    def execute(self, requests):
        if not self.decoupled:
            return [self.response(request) for request in requests]
        for request in requests:
            sender = request.get_response_sender()
            for index in range(2):
                sender.send(self.response(request, index=index))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
