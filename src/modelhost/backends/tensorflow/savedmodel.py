"""Running a SavedModel's signature in a TF1 session (session.py), loaded by `tf.compat.v1.saved_model.load`,
as Triton's backend loads it (LoadSavedModel): the MetaGraph of the tags, its variables restored and its init op
run; the signature's tensors are fed and fetched by the graph names the signature gives them.
"""

from __future__ import annotations

import contextlib
import importlib
from pathlib import Path
from typing import Any

from modelhost.backends.api import Arrays
from modelhost.backends.tensorflow.runtime import tensorflow
from modelhost.backends.tensorflow.session import SessionOptions, SessionRunner, new_session
from modelhost.backends.tensorflow.signature import Signature
from modelhost.errors import BackendInvalidArgument, ModelConfigError


def _quiet() -> contextlib.AbstractContextManager[Any]:
    """TensorFlow logs that its TF1 loader is deprecated (in favour of the eager one, which cannot load every
    SavedModel a session can): not news to a server log."""
    try:
        return importlib.import_module("tensorflow.python.util.deprecation").silence()  # type: ignore[no-any-return]
    except (ImportError, AttributeError):
        return contextlib.nullcontext()


class SavedModelRunner(SessionRunner):
    def __init__(
        self, model_name: str, path: Path, signature: Signature, device: str | None, options: SessionOptions
    ) -> None:
        self.model_name = model_name
        self._required = sorted(signature.inputs)
        tf = tensorflow()
        graph = tf.Graph()
        session = new_session(graph, options)
        # A device of the instance group: the saved placements give way to it (Triton's SetDefaultDevice).
        placement = graph.device(device) if device else contextlib.nullcontext()
        try:
            with graph.as_default(), placement, _quiet():
                tf.compat.v1.saved_model.load(
                    session, sorted(signature.tags), str(path), clear_devices=device is not None
                )
        except Exception as e:  # corrupt variables, ops this TensorFlow lacks, ...
            session.close()
            raise ModelConfigError(f"unable to load model '{model_name}': {e}") from e
        super().__init__(session, signature.input_tensors, signature.output_tensors)

    def run(self, inputs: Arrays, output_names: list[str]) -> Arrays:
        missing = [name for name in self._required if name not in inputs]
        if missing:
            # An input the config marks optional. Refused here, with its name, rather than by the session with
            # the graph's ("must feed a value for placeholder tensor 'serving_default_x'"): a TensorFlow 2
            # signature computes every output in one call that takes all its inputs.
            raise BackendInvalidArgument(
                f"model '{self.model_name}': the TensorFlow signature needs input(s) {missing}, which the "
                "request does not provide"
            )
        return super().run(inputs, output_names)


__all__ = ["SavedModelRunner"]
