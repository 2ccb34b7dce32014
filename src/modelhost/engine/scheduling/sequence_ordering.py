"""Ordered delivery for the sequence batcher (`oldest.preserve_ordering`, Triton's): answers leave in the order their
requests arrived, across sequences. An answer waits for those of the requests that arrived before it; a decoupled
model's responses to a request wait until every earlier request has had its final one. A request that fails or
whose caller goes away holds back nobody."""

from __future__ import annotations

import collections

from modelhost.backends.api import Arrays, ResponseSink
from modelhost.engine.scheduling.sequence_slots import SequenceRequest


class OrderedDelivery:
    __slots__ = ("_requests", "_streams")

    def __init__(self) -> None:
        self._requests: collections.deque[SequenceRequest] = collections.deque()
        self._streams: collections.deque[OrderedSink] = collections.deque()  # decoupled requests'

    def enlist(self, request: SequenceRequest) -> None:
        """The request takes its place in the arrival order."""
        self._requests.append(request)

    def sink(self, target: ResponseSink) -> OrderedSink:
        """Where a decoupled model's request sends its responses: passed on to `target` in turn."""
        return OrderedSink(target, self._streams)

    def deliver(self, request: SequenceRequest, answer: Arrays | BaseException) -> None:
        """The request has its answer: answer the requests at the front of the arrival order that have theirs (or
        were answered already: failed while queued, or gone)."""
        request.answer = answer
        waiting = self._requests
        while waiting:
            first = waiting[0]
            if first.answer is None and not first.future.done():
                return
            waiting.popleft()
            if first.answer is not None:
                first.resolve(first.answer)


class OrderedSink(ResponseSink):
    """oldest.preserve_ordering for a decoupled model: what the model sends for one request, passed on to the
    request's own sink once every request that arrived before it has sent its final response (held till then)."""

    def __init__(self, target: ResponseSink, order: collections.deque[OrderedSink]) -> None:
        super().__init__()
        self.target = target
        self.order = order
        self.held: list[tuple[Arrays | None, BaseException | None, bool]] = []
        order.append(self)
        target.on_cancel = self._cancel_model  # the caller went away: the model hears of it, as without us

    def _cancel_model(self) -> None:
        if self.on_cancel is not None:
            self.on_cancel()

    def put(self, outputs: Arrays | None, error: BaseException | None = None, final: bool = False) -> None:
        if self.finished:
            return
        self.finished = final
        if self.order and self.order[0] is self:
            self.target.put(outputs, error, final)
            if final:
                self._next()
        else:
            self.held.append((outputs, error, final))

    def abandon(self) -> None:
        """The request failed without its final response: it holds back nobody any more."""
        self.finished = True
        self.held.clear()
        if self.order and self.order[0] is self:
            self._next()

    def _next(self) -> None:
        """This request is done: the next ones pass on what they hold, each done one making way for the next."""
        self.order.popleft()
        while self.order:
            front = self.order[0]
            for outputs, error, final in front.held:
                front.target.put(outputs, error, final)
            front.held.clear()
            if not front.finished:
                return
            self.order.popleft()
