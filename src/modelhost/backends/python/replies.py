"""What a python model's stub answers, read on the server: the outcome of each request of an execute (its outputs,
its error, or its rescheduling), and the responses of a decoupled model, streamed to each request's sink. Outputs
are copied out of the stub's memory, whose blocks then go back to it, and checked as Triton's python backend
passes them on."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from modelhost.backends.api import Arrays, Job, Outputs, Rescheduled
from modelhost.backends.python import ipc
from modelhost.backends.python.bls import ERRORS_BY_CODE
from modelhost.backends.python.ipc import as_refs, read_tensor, shared_blocks
from modelhost.backends.python.process import FREES_PER_MESSAGE, Stub, StubFailed
from modelhost.errors import InternalError
from modelhost.io_specs import TensorSpec, format_shape

FINAL = 1  # TRITONSERVER_RESPONSE_COMPLETE_FINAL


class ReplyReader:
    """The replies of one instance's model (named `model_name`) with its configured outputs."""

    def __init__(
        self,
        model_name: str,
        outputs: dict[str, TensorSpec],
        max_batch_size: int,
        decoupled: bool,
        iterative: bool,
    ) -> None:
        self.model_name = model_name
        self.outputs = outputs
        self.max_batch_size = max_batch_size
        self.decoupled = decoupled
        self.iterative = iterative

    def outcomes(
        self, stub: Stub, jobs: list[Job], keys: list[int], reply: dict[str, Any]
    ) -> list[Arrays | BaseException]:
        """One outcome per job of an execute, from the stub's reply to it."""
        if reply.get("error"):
            for key in keys:
                stub.sinks.pop(key, None)
            failure = InternalError(reply["error"])
            return [failure] * len(jobs)
        rescheduled = set(reply.get("rescheduled") or ())
        outcomes: list[Arrays | BaseException] = []
        for index, (job, key) in enumerate(zip(jobs, keys, strict=True)):
            if index in rescheduled:
                outcomes.append(self._rescheduled(stub, key))
            elif self.decoupled:
                outcomes.append({})  # the responses travel through the job's sink
            else:
                outcomes.append(self._outputs(stub, job, reply["responses"][index]))
        return outcomes

    def _rescheduled(self, stub: Stub, key: int) -> Arrays | BaseException:
        """A request the model handed back: run again by an iterative sequence's batcher (which hands it, and
        its response sink, to the stub anew), refused by any other scheduler."""
        sink = stub.sinks.pop(key, None)
        if self.iterative:
            return Rescheduled()
        error = InternalError(
            f"model '{self.model_name}' released a request with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, which "
            "only an iterative sequence can run again: set sequence_batching { iterative_sequence: true } in its "
            "config"
        )
        if sink is not None:
            sink.put(None, error, final=True)
        return error

    def _outputs(self, stub: Stub, job: Job, response: dict[str, Any] | None) -> Arrays | BaseException:
        if response is None:
            return InternalError(f"model '{self.model_name}' returned no response for the request")
        arrays = self._arrays(stub, response)
        if isinstance(arrays, BaseException):
            return arrays
        checked = self._check_outputs(job, arrays)
        if isinstance(checked, BaseException):
            return checked
        return with_parameters(checked, response)

    def _arrays(self, stub: Stub, response: dict[str, Any]) -> Arrays | BaseException:
        """A response's tensors copied out of the stub's memory (whose blocks then go back), or its error."""
        refs = as_refs(response.get("outputs"))
        arrays: Arrays = {ref.name: read_tensor(stub.segments, ref) for ref in refs}
        stub.frees.extend(shared_blocks(refs))
        if len(stub.frees) >= FREES_PER_MESSAGE:
            # A long stream of responses and no request to carry the frees back: send them on their own, so the
            # stub's memory stays bounded.
            with contextlib.suppress(StubFailed):
                stub.send({"op": "free"})
        error = response.get("error")
        if error is not None:
            message, code = error
            return ERRORS_BY_CODE.get(int(code), InternalError)(message)
        return arrays

    def _check_outputs(self, job: Job, arrays: Arrays) -> Arrays | BaseException:
        """The requested outputs the model returned, as Triton's python backend passes them on: the others are
        dropped (an output the client did not ask for, or that the config does not name), a requested one the
        model left out is left out of the response, and the shape and data type are the model's, whatever the
        config says. Checked, so that the answer on the wire is well-formed (a failure names the model): a data
        type the protocol has, and a shape the config's `reshape` can be applied to."""
        checked: Arrays = {}
        for name in job.output_names:
            array, spec = arrays.get(name), self.outputs.get(name)
            if array is None or spec is None:
                continue
            if ipc.datatype_of(array) is None:
                return InternalError(
                    f"model '{self.model_name}' returned output '{name}' of numpy type {array.dtype}, which has "
                    "no Triton data type"
                )
            if spec.reshape is not None and not self._reshapes(array, spec.dims):
                return InternalError(
                    f"model '{self.model_name}' returned output '{name}' of shape "
                    f"{format_shape(list(array.shape))}, which does not fit the shape its configuration reshapes "
                    f"it to, {format_shape(spec.full_shape(self.max_batch_size))}"
                )
            checked[name] = array
        return checked

    def _reshapes(self, array: Any, dims: tuple[int, ...]) -> bool:
        """Whether an output can take its configured dims (after its batch dimension), as the answer gives it."""
        if self.max_batch_size > 0 and array.ndim == 0:
            return False
        if dims.count(-1) > 1:
            return True  # not reshaped: several sizes cannot be told apart
        try:
            array.reshape(([array.shape[0]] if self.max_batch_size > 0 else []) + list(dims))
        except ValueError:
            return False
        return True

    def on_response(self, stub: Stub, message: dict[str, Any]) -> None:
        """A decoupled model's response (or just its FINAL flag), to its request's sink."""
        key = message["key"]
        sink = stub.sinks.get(key)
        final = bool(message["flags"] & FINAL)
        described = message.get("response")
        if final:
            stub.sinks.pop(key, None)
        if described is None:
            if sink is not None:
                sink.put(None, None, final)
            return
        arrays = self._arrays(stub, described)
        if sink is None:
            return  # the request is gone (its client went away); the blocks are freed all the same
        if isinstance(arrays, BaseException):
            sink.put(None, arrays, final)
        else:
            sink.put(with_parameters(arrays, described), None, final)


def with_parameters(arrays: Arrays, response: dict[str, Any]) -> Arrays:
    """The response's tensors with the parameters the model set on it (a JSON object, as pb_utils keeps them).
    Only what both protocols can carry: a value that is not a bool, an int64, a float or a string (which a model
    can set only by passing its own JSON text) is left out."""
    text = response.get("parameters")
    if not text or text == "{}":  # most responses: nothing to decode
        return arrays
    parameters = {
        key: value
        for key, value in json.loads(text).items()
        if isinstance(value, bool | float | str) or (isinstance(value, int) and -(2**63) <= value < 2**63)
    }
    return Outputs(arrays, parameters) if parameters else arrays
