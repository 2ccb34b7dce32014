"""The response sender of a request (`request.get_response_sender()`), with Triton's rules on what may be sent."""

from __future__ import annotations

import threading

from modelhost.backends.python.pb_utils.errors import TritonModelException
from modelhost.backends.python.pb_utils.responses import InferenceResponse
from modelhost.backends.python.pb_utils.runtime import require_runtime

TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1


class InferenceResponseSender:
    """`request.get_response_sender()`: how a decoupled model (or a default one, once) sends responses."""

    def __init__(self, key: int | None, decoupled: bool | None) -> None:
        self._key = key
        self._decoupled = decoupled
        self._closed = False
        self._sent = 0
        self._lock = threading.Lock()

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        if response is not None and not isinstance(response, InferenceResponse):
            raise TypeError(
                f"send(): response must be a pb_utils.InferenceResponse or None, not {type(response).__name__}"
            )
        if isinstance(flags, bool) or not isinstance(flags, int):
            raise TypeError(f"send(): flags must be an int, not {type(flags).__name__}")
        if flags not in (0, TRITONSERVER_RESPONSE_COMPLETE_FINAL):
            raise TritonModelException("Unable to send response. Unsupported flag provided.")
        if flags == 0 and response is None:
            raise TritonModelException(
                "Inference Response object must be provided when the response flags is set to zero."
            )
        runtime = require_runtime("InferenceResponseSender.send()") if self._key is not None else None
        self._update_state(response, flags)
        assert runtime is not None and self._key is not None  # _update_state refuses senders without a key
        runtime.send_response(self._key, response, flags)

    def is_cancelled(self) -> bool:
        if self._key is None:
            return False
        return require_runtime("InferenceResponseSender.is_cancelled()").is_cancelled(self._key)

    # -- for the stub

    def _update_state(self, response: InferenceResponse | None, flags: int) -> None:
        """Triton's ResponseSender::UpdateStateAndCounters: check a response may go out and count it. The stub
        calls it (flags FINAL) for each response `execute` returns, so a default-mode model cannot both send
        through the sender and return a response."""
        if self._decoupled is None:
            raise TritonModelException(
                "Unable to send response. Response sender has no reference to the decoupled state of the model."
            )
        with self._lock:
            if not self._decoupled:
                if response is not None and self._sent > 0:
                    raise TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send more than one response."
                    )
                if response is None and flags == TRITONSERVER_RESPONSE_COMPLETE_FINAL and self._sent == 0:
                    raise TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send complete final before sending "
                        "a response."
                    )
            if self._closed:
                raise TritonModelException("Unable to send response. Response sender has been closed.")
            if flags == TRITONSERVER_RESPONSE_COMPLETE_FINAL:
                self._closed = True
            self._sent += 1

    def _close(self) -> None:
        """No more responses (Triton closes every sender of a batch whose execute raised)."""
        with self._lock:
            self._closed = True

    def _is_closed(self) -> bool:
        return self._closed

    def _responses_sent(self) -> int:
        return self._sent
