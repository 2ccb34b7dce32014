"""Stand-in for Triton's C++ `identity` test backend (triton-inference-server/identity_backend, r24.09), as a
python model: each requested output OUTPUT<n> is the input INPUT<n>, same datatype and shape; an optional
input that is not given makes a zero tensor of its configured shape (-1 as 1, with the batch dimension of the
first input).

Parameters honoured as the C++ backend does: `execute_delay_ms` (slept once per execution; times the
instance's index when `instance_wise_delay_multiplier` is set) and `creation_delay_sec` (slept at load).
The runner copies this file into the version folders of models whose config says `backend: "identity"` and
changes the backend to "python".
"""

import json
import re
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = config.get("parameters", {}) or {}

        def param(name):
            value = params.get(name)
            return value.get("string_value") if isinstance(value, dict) else None

        inputs = config.get("input", [])
        outputs = config.get("output", [])
        if len(inputs) != len(outputs):
            raise pb_utils.TritonModelException("model configuration must have equal input/output pairs")
        self.optional = {}
        for i in inputs:
            name = i["name"]
            if not name.startswith("INPUT"):
                raise pb_utils.TritonModelException(
                    f"expected input name to follow INPUT<index> pattern, got '{name}'"
                )
            if i.get("optional"):
                dims = (i.get("reshape") or {}).get("shape", i.get("dims", []))
                dtype = pb_utils.triton_string_to_numpy(i["data_type"])
                self.optional[name] = (dtype, [1 if int(d) == -1 else int(d) for d in dims])
        for o in outputs:
            if not o["name"].startswith("OUTPUT"):
                raise pb_utils.TritonModelException(
                    f"expected output name to follow OUTPUT<index> pattern, got '{o['name']}'"
                )
        self.outputs = [o["name"] for o in outputs]
        self.batching = int(config.get("max_batch_size", 0) or 0) > 0
        self.delay_ms = int(param("execute_delay_ms") or 0)
        multiplier = int(param("instance_wise_delay_multiplier") or 0)
        if self.delay_ms and multiplier > 0:
            match = re.search(r"_(\d+)$", args.get("model_instance_name", ""))
            index = int(match.group(1)) if match else 0
            self.delay_ms *= max(multiplier * index, 1)
        creation = param("creation_delay_sec")
        if creation:
            time.sleep(int(creation))

    def execute(self, requests):
        if self.delay_ms > 0:
            time.sleep(self.delay_ms / 1000.0)
        responses = []
        for request in requests:
            try:
                requested = list(request.requested_output_names())
            except Exception:
                requested = []
            given = {t.name(): t for t in request.inputs()}
            batch = None
            if self.batching and given:
                first = next(iter(given.values())).as_numpy()
                batch = first.shape[0] if first.ndim > 0 else 1
            tensors = []
            error = None
            for out in requested or self.outputs:
                source = "INPUT" + out[len("OUTPUT") :]
                tensor = given.get(source)
                if tensor is not None:
                    tensors.append(pb_utils.Tensor(out, tensor.as_numpy()))
                elif source in self.optional:
                    dtype, shape = self.optional[source]
                    if batch is not None:
                        shape = [batch, *shape]
                    if dtype == np.object_:
                        data = np.full(shape, b"", dtype=np.object_)
                    else:
                        data = np.zeros(shape, dtype=dtype)
                    tensors.append(pb_utils.Tensor(out, data))
                elif requested:
                    error = pb_utils.TritonError(f"failed to get input '{source}'")
                    break
            if error is not None:
                responses.append(pb_utils.InferenceResponse(output_tensors=[], error=error))
            else:
                responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        return responses
