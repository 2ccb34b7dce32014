"""Running a GraphDef (`tensorflow_graphdef`): the graph imported into a graph of its own and run in a TF1 session
(session.py), as Triton's backend runs it.

A GraphDef declares no inputs and outputs: config names are node names ("OUTPUT" is the node's first output
"OUTPUT:0"; "node:1" names another output), any Placeholder may be an input and any node an output. The
variables of a GraphDef that is not frozen live in the session (freed when it closes), initialised by the ops of
TF_INIT_OPS_FILE, run once at load. The eager alternative (a `tf.compat.v1.wrap_function`) would keep them in
TensorFlow's process-wide resource manager until the process ends, and costs several times more per call.
"""

from __future__ import annotations

import contextlib
import importlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from modelhost.backends.model_io import TensorInfo
from modelhost.backends.tensorflow.dtypes import TF_TO_CONFIG
from modelhost.backends.tensorflow.runtime import tensorflow
from modelhost.backends.tensorflow.session import SessionOptions, SessionRunner, new_session
from modelhost.errors import ModelConfigError


def init_ops(model_name: str, version_dir: Path, filename: str) -> list[str]:
    """The op names of TF_INIT_OPS_FILE: a JSON object {"init_ops": [...]}, in the version directory, else in the
    model directory (Triton's lookup)."""
    for directory in (version_dir, version_dir.parent):
        path = directory / filename
        if path.is_file():
            break
    else:
        raise ModelConfigError(
            f"unable to load model '{model_name}': TF_INIT_OPS_FILE '{filename}' is in neither {version_dir} "
            f"nor {version_dir.parent}"
        )
    try:
        names = json.loads(path.read_text())["init_ops"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ModelConfigError(
            f"unable to load model '{model_name}': TF_INIT_OPS_FILE '{path}' must be a JSON object with a list "
            f"'init_ops' of operation names: {e!r}"
        ) from e
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ModelConfigError(
            f"unable to load model '{model_name}': 'init_ops' of TF_INIT_OPS_FILE '{path}' must be a list of "
            "operation names"
        )
    return names


def tensor_name(name: str) -> str:
    return name if ":" in name else f"{name}:0"


def _info(name: str, tensor: Any) -> TensorInfo:
    types = importlib.import_module("tensorflow.core.framework.types_pb2")
    data_type = TF_TO_CONFIG.get(types.DataType.Name(tensor.dtype.as_datatype_enum))
    shape = tensor.shape
    dims = None if shape.rank is None else tuple(-1 if d is None else int(d) for d in shape.as_list())
    return TensorInfo(name, data_type, dims)


class GraphDefRunner(SessionRunner):
    def __init__(
        self,
        model_name: str,
        path: Path,
        ops: list[str],
        device: str | None,
        options: SessionOptions,
        names: Iterable[tuple[str, str]],
    ) -> None:
        """`names`: the config's tensors, as (kind, name) with kind "input" or "output"."""
        self.model_name = model_name
        tf = tensorflow()
        graph_def = tf.compat.v1.GraphDef()
        try:
            graph_def.ParseFromString(path.read_bytes())
        except Exception as e:  # protobuf's DecodeError
            raise ModelConfigError(
                f"unable to load model '{model_name}': failed to read GraphDef '{path}': {e}"
            ) from e
        if len(graph_def.node) == 0:
            raise ModelConfigError(f"model {model_name} has an empty network")  # Triton's wording
        self._graph: Any = tf.Graph()
        placement: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
        if device is not None:
            # The instance group's device instead of the saved placements (Triton clears them too).
            for node in graph_def.node:
                node.ClearField("device")
            placement = self._graph.device(device)
        try:
            with self._graph.as_default(), placement:
                tf.compat.v1.import_graph_def(graph_def, name="")
        except Exception as e:  # ops this TensorFlow lacks, malformed nodes
            raise ModelConfigError(f"unable to load model '{model_name}': {e}") from e
        listed = list(names)
        super().__init__(
            new_session(self._graph, options),
            {n: tensor_name(n) for kind, n in listed if kind == "input"},
            {n: tensor_name(n) for kind, n in listed if kind == "output"},
        )
        if ops:
            try:
                self._run_init_ops(ops)
            except BaseException:
                self.close()
                raise

    def _run_init_ops(self, names: list[str]) -> None:
        try:
            ops = [self._graph.get_operation_by_name(n) for n in names]
        except (KeyError, ValueError) as e:
            raise ModelConfigError(
                f"unable to load model '{self.model_name}': TF_INIT_OPS_FILE names an operation the graph "
                f"lacks: {e}"
            ) from e
        try:
            self._session.run(ops)
        except Exception as e:
            raise ModelConfigError(f"unable to load model '{self.model_name}': init ops failed: {e}") from e

    def placeholders(self) -> dict[str, TensorInfo]:
        return {
            op.name: _info(op.name, op.outputs[0])
            for op in self._graph.get_operations()
            if op.type == "Placeholder"
        }

    def output(self, name: str) -> TensorInfo | None:
        """The tensor config output `name` designates; None where the graph has none."""
        try:
            return _info(name, self._graph.get_tensor_by_name(tensor_name(name)))
        except (KeyError, ValueError):
            return None

    def unfed_placeholders(self, outputs: Iterable[str], inputs: Iterable[str]) -> dict[str, list[str]]:
        """For each output, the Placeholders it needs that are not among `inputs` (a session would only say so
        when a request runs)."""
        fed = {tensor_name(n) for n in inputs}
        missing: dict[str, list[str]] = {}
        for output in outputs:
            seen: set[Any] = set()
            stack = [self._graph.get_tensor_by_name(tensor_name(output)).op]
            needs: set[str] = set()
            while stack:
                op = stack.pop()
                if op in seen:
                    continue
                seen.add(op)
                if op.type == "Placeholder" and f"{op.name}:0" not in fed:
                    needs.add(op.name)
                stack.extend(t.op for t in op.inputs if t.name not in fed)
                stack.extend(op.control_inputs)
            if needs:
                missing[output] = sorted(needs)
        return missing


__all__ = ["GraphDefRunner", "init_ops", "tensor_name"]
