"""The server's execute calls in the stub: requests made of the inputs in shared memory, the model's `execute` run
on them, and Triton's rules applied to what it returns (one response per request, None for a rescheduled one,
nothing for a decoupled model, whose responses go through its senders); the responses' outputs go into our
arena for the server."""

from __future__ import annotations

from typing import Any

from modelhost.backends.python import pb_utils
from modelhost.backends.python.ipc import as_refs, put_tensor, shared_blocks, view_tensor
from modelhost.backends.python.stub.connection import Connection
from modelhost.backends.python.stub.errors import ExecuteError, error_text
from modelhost.backends.python.stub.model import ModelRunner

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


class Executor:
    def __init__(self, connection: Connection, runner: ModelRunner) -> None:
        self.connection = connection
        self.runner = runner
        # The connection's, which stay the same objects: read on every request.
        self.segments = connection.segments
        self.inputs = connection.inputs
        self.cancelled = connection.cancelled
        # Responses of a default-mode model sent through a request's sender (not returned), by request key: they
        # go back with the execute's reply.
        self.sent: dict[int, dict[str, Any] | None] = {}

    def on_execute(self, message: dict[str, Any]) -> None:
        runner, connection = self.runner, self.connection
        keys = [r["key"] for r in message["requests"]]
        reply: dict[str, Any] = {"op": "executed", "id": message["id"], "error": None, "responses": None}
        executed = False
        try:
            requests = [self._request(r) for r in message["requests"]]  # inputs onto a GPU can fail
            executed = True
            returned = runner.call(runner.model.execute, requests)
            rescheduled = [
                i
                for i, r in enumerate(requests)
                if r._release_flags() & pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE
            ]
            if not runner.decoupled:
                reply["responses"] = self._responses(requests, keys, returned, set(rescheduled))
            elif returned is not None:  # its responses go through the senders; these would be lost unsaid
                raise ExecuteError(
                    f"Python model '{runner.instance_name}' is using the decoupled mode and the execute function "
                    "must return None."
                )
            if rescheduled:
                reply["rescheduled"] = rescheduled
                for index in rescheduled:  # run again, the server sends its inputs anew
                    connection.release_inputs(keys[index])
        except BaseException as e:
            reply["error"] = (
                f"Failed to process the request(s) for model '{runner.instance_name}', message: {error_text(e)}"
            )
        finally:
            for key in keys:
                self.sent.pop(key, None)
                self.cancelled.discard(key)
                # A decoupled model's inputs last until its final response.
                if not runner.decoupled or not executed:
                    connection.release_inputs(key)
        connection.channel_send(reply)

    def _request(self, data: dict[str, Any]) -> pb_utils.InferenceRequest:
        runner = self.runner
        refs = as_refs(data["inputs"])
        self.inputs[data["key"]] = shared_blocks(refs)
        segments = self.segments
        if runner.input_device is None:
            tensors = [pb_utils.Tensor._in_place(ref.name, view_tensor(segments, ref)) for ref in refs]
        else:
            device = runner.input_device
            tensors = [pb_utils.Tensor._to_gpu(ref.name, view_tensor(segments, ref), device) for ref in refs]
        return pb_utils.InferenceRequest._from_server(
            key=data["key"],
            model_name=runner.model_name,
            model_version=data["model_version"],
            inputs=tensors,
            requested_output_names=data["outputs"],
            request_id=data["request_id"],
            correlation_id=data["correlation_id"],
            flags=data["flags"],
            timeout=data["timeout"],
            parameters_json=data["parameters"],
            decoupled=runner.decoupled,
            trace_context=data.get("trace_context"),
            trace_id=data.get("trace_id", 0),
        )

    def _responses(
        self, requests: list[pb_utils.InferenceRequest], keys: list[int], returned: Any, rescheduled: set[int]
    ) -> list[dict[str, Any] | None]:
        if returned is None and all(k in self.sent or i in rescheduled for i, k in enumerate(keys)):
            return [self.sent.get(k) for k in keys]  # every response went through its sender
        if not isinstance(returned, list | tuple):
            raise ExecuteError(
                f"Expected a list in the execute return, received type '{type(returned).__name__}'."
            )
        if len(returned) != len(keys):
            raise ExecuteError(
                f"Number of InferenceResponse objects do not match the number of InferenceRequest objects. "
                f"InferenceRequest(s) size is:{len(keys)}, and InferenceResponse(s) size is:{len(returned)}\n"
            )
        described: list[dict[str, Any] | None] = []
        for index, (request, key, response) in enumerate(zip(requests, keys, returned, strict=True)):
            if index in rescheduled:
                if response is not None:  # Triton's words, its spelling included
                    raise ExecuteError(
                        "Expected a None object in the execute function return list for reschduled request, got "
                        f"{type(response)}"
                    )
                described.append(None)
                continue
            if response is None:
                described.append(self.sent.get(key))
                continue
            # As Triton: a returned response counts as the request's one response (an error if the model also
            # sent one through the request's sender).
            request.get_response_sender()._update_state(response, FINAL)
            described.append(self.describe(response))
        return described

    def describe(self, response: pb_utils.InferenceResponse) -> dict[str, Any]:
        """A response for the server: its outputs copied into our arena, its error as (message, code)."""
        if not isinstance(response, pb_utils.InferenceResponse):
            raise pb_utils.TritonModelException(
                f"Expected an 'InferenceResponse' object in the execute function return list, found type "
                f"'{type(response).__name__}'."
            )
        error = response.error()
        outputs = (
            []
            if error is not None
            else [put_tensor(self.connection.arena, t.name(), t._host_array()) for t in response.output_tensors()]
        )
        return {
            "outputs": outputs,
            "error": None if error is None else (error.message(), int(error.code())),
            "parameters": response.parameters(),
        }
