"""One instance of a TensorFlow model: a runner (its own, or shared with other instances) and the mapping of
TensorFlow's errors to the server's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from modelhost.backends.api import Arrays
from modelhost.backends.tensorflow.runtime import tensorflow
from modelhost.errors import BackendInvalidArgument, InternalError, ModelhostError

# Lines of a session's error message that say where in the graph, not what: the reason is the rest.
_WHERE = ("Graph execution error", "Detected at node", "Node:", "[[", "File ")


def reason(message: str) -> str:
    """TensorFlow's error message without the graph location and stack trace it wraps the reason in."""
    text = message.split("\n\nOriginal stack trace", 1)[0]
    lines = [line.strip() for line in text.splitlines()]
    kept = [line for line in lines if line and not line.startswith(_WHERE)]
    return " ".join(kept) or message


class Runner(Protocol):
    def run(self, inputs: Arrays, output_names: list[str]) -> Arrays: ...


class TensorFlowInstance:
    def __init__(self, name: str, model_name: str, runner: Runner, release: Callable[[], None]) -> None:
        self.name = name
        self.model_name = model_name
        self._runner: Runner | None = runner
        self._release = release
        self._errors: Any = tensorflow().errors

    def execute(self, inputs: Arrays, output_names: list[str]) -> Arrays:
        runner = self._runner
        if runner is None:
            raise InternalError(f"model '{self.model_name}': instance {self.name} is closed")
        try:
            return runner.run(inputs, output_names)
        except ModelhostError:
            raise
        except self._errors.InvalidArgumentError as e:  # a value or shape the graph's ops refuse
            message = f"tensorflow error for model '{self.model_name}': {reason(e.message)}"
            raise BackendInvalidArgument(message) from e
        except (
            TypeError,
            ValueError,
        ) as e:  # an input the session cannot feed ("Cannot feed value of shape")
            raise BackendInvalidArgument(f"tensorflow error for model '{self.model_name}': {e}") from e
        except self._errors.OpError as e:  # any other fault of the graph's ops fails this batch only
            raise InternalError(f"tensorflow error for model '{self.model_name}': {reason(e.message)}") from e
        except Exception as e:
            raise InternalError(f"tensorflow error for model '{self.model_name}': {e}") from e

    def close(self) -> None:
        if self._runner is not None:
            self._runner = None
            self._release()


__all__ = ["Runner", "TensorFlowInstance", "reason"]
