"""The ensemble plan's load-time checks and the scheduler's way through the graph, with a fake server in place
of the composing models (what each step was sent, and when, is recorded)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from modelhost.backends.api import BackendServices, Job, ResponseSink
from modelhost.engine.ensemble.plan import EnsemblePlan
from modelhost.engine.ensemble.scheduler import EnsembleScheduler, fit_batch
from modelhost.errors import InternalError, ModelConfigError
from modelhost.types import InferenceRequest, InferenceResponse, Tensor


def in_loop(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    """An async test, run in its own event loop."""

    @functools.wraps(test)
    def run() -> None:
        asyncio.run(test())

    return run


def config(text: str) -> ModelConfig:
    return text_format.Parse(text, ModelConfig())


def model(name: str, inputs: str, outputs: str, *, batch: int = 8, decoupled: bool = False) -> ModelConfig:
    """A composing model: `inputs`/`outputs` like "X:TYPE_FP32:[4];Y:TYPE_FP32:[4]"."""

    def tensors(spec: str) -> str:
        return ", ".join(
            f'{{ name: "{n}" data_type: {t} dims: {d} }}'
            for n, t, d in (p.split(":") for p in spec.split(";"))
        )

    policy = "model_transaction_policy { decoupled: true }" if decoupled else ""
    return config(
        f'name: "{name}" max_batch_size: {batch} input [ {tensors(inputs)} ] output [ {tensors(outputs)} ] {policy}'
    )


def step(name: str, inputs: dict[str, str], outputs: dict[str, str]) -> str:
    maps = " ".join(f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items())
    maps += " " + " ".join(f'output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items())
    return f'{{ model_name: "{name}" model_version: -1 {maps} }}'


def ensemble(
    steps: list[str], *, inputs: str = "A", outputs: str = "OUT", extra: str = "", batch: int = 8
) -> Any:
    def tensors(names: str) -> str:
        return ", ".join(f'{{ name: "{n}" data_type: TYPE_FP32 dims: [ 4 ] }}' for n in names.split(","))

    return config(
        f'name: "ens" platform: "ensemble" max_batch_size: {batch} input [ {tensors(inputs)} ] '
        f"output [ {tensors(outputs)} ] ensemble_scheduling {{ {extra} step [ {', '.join(steps)} ] }}"
    )


DOUBLE = model("double", "X:TYPE_FP32:[4]", "Y:TYPE_FP32:[4]")
NEGATE = model("negate", "X:TYPE_FP32:[4]", "Y:TYPE_FP32:[4]")
CHAIN = ensemble(
    [step("double", {"X": "A"}, {"Y": "doubled"}), step("negate", {"X": "doubled"}, {"Y": "OUT"})],
)


# --- the plan


def test_a_step_mapping_an_unknown_input_is_refused_in_tritons_words() -> None:
    bad = ensemble([step("double", {"NOPE": "A"}, {"Y": "OUT"})])
    with pytest.raises(
        ModelConfigError, match="ensemble tensor A is mapping to non-existing input NOPE in model double"
    ):
        EnsemblePlan(bad, {"double": DOUBLE})


def test_an_unmapped_required_input_and_an_unknown_output_are_refused() -> None:
    two = model("two", "X:TYPE_FP32:[4];Z:TYPE_FP32:[4]", "Y:TYPE_FP32:[4]")
    with pytest.raises(ModelConfigError, match="input Z in model two is not mapped to any ensemble tensors"):
        EnsemblePlan(ensemble([step("two", {"X": "A"}, {"Y": "OUT"})]), {"two": two})
    with pytest.raises(ModelConfigError, match="is mapped from non-existing output W in model double"):
        EnsemblePlan(ensemble([step("double", {"X": "A"}, {"W": "OUT"})]), {"double": DOUBLE})


def test_inconsistent_types_and_shapes_are_refused() -> None:
    ints = model("ints", "X:TYPE_INT32:[4]", "Y:TYPE_FP32:[4]")
    with pytest.raises(
        ModelConfigError,
        match="inconsistent data type: TYPE_FP32 is inferred from model ens while TYPE_INT32",
    ):
        EnsemblePlan(ensemble([step("ints", {"X": "A"}, {"Y": "OUT"})]), {"ints": ints})
    wide = model("wide", "X:TYPE_FP32:[5]", "Y:TYPE_FP32:[4]")
    with pytest.raises(
        ModelConfigError, match=r"inconsistent shape: \[-1,4\] is inferred from model ens while \[-1,5\]"
    ):
        EnsemblePlan(ensemble([step("wide", {"X": "A"}, {"Y": "OUT"})]), {"wide": wide})


def test_a_step_with_a_smaller_batch_limit_is_refused() -> None:
    small = model("small", "X:TYPE_FP32:[4]", "Y:TYPE_FP32:[4]", batch=2)
    with pytest.raises(
        ModelConfigError, match="contains model small which only allows maximum batch size to be 2"
    ):
        EnsemblePlan(ensemble([step("small", {"X": "A"}, {"Y": "OUT"})]), {"small": small})


def test_a_non_batching_model_fits_a_batching_ensemble_through_the_full_shape() -> None:
    full = model("full", "X:TYPE_FP32:[-1,4]", "Y:TYPE_FP32:[-1,4]", batch=0)
    EnsemblePlan(ensemble([step("full", {"X": "A"}, {"Y": "OUT"})]), {"full": full})


def test_decoupled_is_decided_by_the_steps() -> None:
    assert not EnsemblePlan(CHAIN, {"double": DOUBLE, "negate": NEGATE}).decoupled
    repeat = model("double", "X:TYPE_FP32:[4]", "Y:TYPE_FP32:[4]", decoupled=True)
    assert EnsemblePlan(CHAIN, {"double": repeat, "negate": NEGATE}).decoupled


def test_a_step_may_not_join_the_responses_of_two_decoupled_models() -> None:
    first = model("first", "X:TYPE_FP32:[4]", "Y:TYPE_FP32:[4]", decoupled=True)
    second = model("second", "X:TYPE_FP32:[4]", "Y:TYPE_FP32:[4]", decoupled=True)
    join = model("join", "P:TYPE_FP32:[4];Q:TYPE_FP32:[4]", "Y:TYPE_FP32:[4]")
    steps = [
        step("first", {"X": "A"}, {"Y": "p"}),
        step("second", {"X": "A"}, {"Y": "q"}),
        step("join", {"P": "p", "Q": "q"}, {"Y": "OUT"}),
    ]
    with pytest.raises(ModelConfigError, match="receives inputs originated from different decoupled models"):
        EnsemblePlan(ensemble(steps), {"first": first, "second": second, "join": join})


def test_the_outputs_may_not_come_from_two_decoupled_models() -> None:
    # The ensemble's response joins its outputs: Triton's sink node (its L0_model_config
    # invalid_decoupled_branching_2), named after the ensemble.
    first = model("first", "X:TYPE_FP32:[4]", "Y:TYPE_FP32:[4]", decoupled=True)
    second = model("second", "X:TYPE_FP32:[4]", "Y:TYPE_FP32:[4]", decoupled=True)
    steps = [step("first", {"X": "A"}, {"Y": "D"}), step("second", {"X": "A"}, {"Y": "N"})]
    config = ensemble(steps, outputs="D,N")
    with pytest.raises(
        ModelConfigError,
        match=f"step of model '{config.name}' receives inputs originated from different decoupled models",
    ):
        EnsemblePlan(config, {"first": first, "second": second})


def test_only_the_steps_of_the_requested_outputs_are_needed() -> None:
    steps = [step("double", {"X": "A"}, {"Y": "D"}), step("negate", {"X": "A"}, {"Y": "N"})]
    plan = EnsemblePlan(ensemble(steps, outputs="D,N"), {"double": DOUBLE, "negate": NEGATE})
    assert plan.needed_steps(["D"]) == {0}
    assert plan.needed_steps(["D", "N"]) == {0, 1}


def test_fit_batch_adds_or_drops_the_batch_dimension_of_one() -> None:
    row = np.zeros((1, 4), np.float32)
    assert fit_batch(np.zeros(4, np.float32), 0, (4,), True).shape == (1, 4)
    assert fit_batch(row, 1, (4,), False).shape == (4,)
    assert fit_batch(row, 1, (1, 4), False).shape == (1, 4)
    assert fit_batch(row, 1, (4,), True) is row


# --- the scheduler


class FakeServer:
    """Answers each step from `answers` (model name -> function of the inputs), recording the requests."""

    def __init__(self, answers: dict[str, Any], decoupled: dict[str, int] | None = None) -> None:
        self.answers = answers
        self.decoupled = decoupled or {}
        self.requests: list[InferenceRequest] = []
        self.running = 0
        self.most_running = 0
        self.per_model: dict[str, int] = {}
        self.most_per_model: dict[str, int] = {}
        self.gate: asyncio.Event | None = None

    def _outputs(self, request: InferenceRequest) -> list[Tensor]:
        arrays = {t.name: t.data for t in request.inputs}
        result = self.answers[request.model_name](arrays)
        if isinstance(result, BaseException):
            raise result
        return [Tensor(n, "FP32", list(a.shape), a) for n, a in result.items()]

    async def infer(self, request: InferenceRequest, *, internal: bool = False) -> InferenceResponse:
        assert internal
        self.requests.append(request)
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        name = request.model_name
        self.per_model[name] = self.per_model.get(name, 0) + 1
        self.most_per_model[name] = max(self.most_per_model.get(name, 0), self.per_model[name])
        try:
            if self.gate is not None:
                await self.gate.wait()
            await asyncio.sleep(0)
            return InferenceResponse(request.model_name, "1", request.id, self._outputs(request))
        finally:
            self.running -= 1
            self.per_model[name] -= 1

    async def infer_stream(
        self, request: InferenceRequest, *, internal: bool = False
    ) -> AsyncIterator[InferenceResponse]:
        self.requests.append(request)
        for i in range(self.decoupled[request.model_name]):
            await asyncio.sleep(0)
            outputs = self._outputs(request)
            for t in outputs:
                t.data = t.data + i
            yield InferenceResponse(
                request.model_name, "1", request.id, outputs, {"triton_final_response": False}
            )
        yield InferenceResponse(request.model_name, "1", request.id, [], {"triton_final_response": True})

    def model_healthy(self, name: str, version: str = "") -> bool:
        return name in self.answers


def scheduler(cfg: Any, composing: dict[str, Any], server: FakeServer) -> EnsembleScheduler:
    return EnsembleScheduler(EnsemblePlan(cfg, composing), cfg, BackendServices(engine=server))


def job(outputs: list[str], **inputs: np.ndarray) -> Job:
    return Job(
        dict(inputs), outputs, 1, request=InferenceRequest("ens", id="r1", parameters={"sequence_id": 7})
    )


ONES = np.ones((1, 4), np.float32)
ANSWERS = {"double": lambda a: {"Y": a["X"] * 2}, "negate": lambda a: {"Y": -a["X"]}}


@in_loop
async def test_a_chain_passes_each_steps_outputs_on_without_copies() -> None:
    server = FakeServer(ANSWERS)
    result = await scheduler(CHAIN, {"double": DOUBLE, "negate": NEGATE}, server).execute(
        job(["OUT"], A=ONES)
    )
    np.testing.assert_array_equal(result["OUT"], -2 * ONES)
    assert [r.model_name for r in server.requests] == ["double", "negate"]
    assert all(r.id == "r1" and r.parameters["sequence_id"] == 7 for r in server.requests)


@in_loop
async def test_independent_steps_run_at_the_same_time() -> None:
    server = FakeServer(ANSWERS)
    server.gate = asyncio.Event()
    steps = [step("double", {"X": "A"}, {"Y": "D"}), step("negate", {"X": "A"}, {"Y": "N"})]
    cfg = ensemble(steps, outputs="D,N")
    run = asyncio.ensure_future(
        scheduler(cfg, {"double": DOUBLE, "negate": NEGATE}, server).execute(job(["D", "N"], A=ONES))
    )
    while server.running < 2:
        await asyncio.sleep(0)
    server.gate.set()
    result = await run
    assert server.most_running == 2
    np.testing.assert_array_equal(result["N"], -ONES)


@in_loop
async def test_a_failed_step_fails_the_request_in_the_ensembles_name() -> None:
    server = FakeServer({**ANSWERS, "negate": lambda a: InternalError("boom")})
    with pytest.raises(InternalError) as caught:
        await scheduler(CHAIN, {"double": DOUBLE, "negate": NEGATE}, server).execute(job(["OUT"], A=ONES))
    assert str(caught.value) == "in ensemble 'ens', boom"
    assert caught.value.failure_reason == "OTHER"


@in_loop
async def test_an_output_a_step_did_not_produce_is_left_out() -> None:
    server = FakeServer({**ANSWERS, "negate": lambda a: {}})
    result = await scheduler(CHAIN, {"double": DOUBLE, "negate": NEGATE}, server).execute(
        job(["OUT"], A=ONES)
    )
    assert result == {}


def optional_pair(name: str, ensemble_inputs: bool = False) -> Any:
    """A model (or, with `ensemble_inputs`, an ensemble's header) of two optional inputs and two outputs."""
    fp4 = "data_type: TYPE_FP32 dims: [ 4 ]"
    names = ("A", "B", "OUT0", "OUT1") if ensemble_inputs else ("X", "Z", "Y", "W")
    return (
        f'name: "{name}" max_batch_size: 8 '
        f'input [ {{ name: "{names[0]}" {fp4} optional: true }}, {{ name: "{names[1]}" {fp4} optional: true }} ] '
        f'output [ {{ name: "{names[2]}" {fp4} }}, {{ name: "{names[3]}" {fp4} }} ]'
    )


# Triton's L0_optional_input "optional_connecting_tensor": two steps of a model whose inputs are optional, each
# answering the outputs of the inputs it got (Y = X, W = Z), all four tensors connected.
PAIR = config(optional_pair("pair"))
PAIR_ANSWER = {"pair": lambda a: {out: a[inp] for inp, out in (("X", "Y"), ("Z", "W")) if inp in a}}
CONNECTED = config(
    optional_pair("ens", ensemble_inputs=True)
    + ' platform: "ensemble" ensemble_scheduling { step [ '
    + step("pair", {"X": "A", "Z": "B"}, {"Y": "y", "W": "w"})
    + ", "
    + step("pair", {"X": "y", "Z": "w"}, {"Y": "OUT0", "W": "OUT1"})
    + " ] }"
)


@in_loop
async def test_an_optional_input_left_out_runs_its_steps_without_it() -> None:
    """As Triton: an optional ensemble input the request leaves out, and an output a step leaves out, are there
    as no tensor; the steps reading them run without them, and the response holds the outputs that exist."""
    server = FakeServer(PAIR_ANSWER)
    ens = scheduler(CONNECTED, {"pair": PAIR}, server)
    result = await ens.execute(job(["OUT0", "OUT1"], A=ONES))
    assert list(result) == ["OUT0"]
    np.testing.assert_array_equal(result["OUT0"], ONES)
    assert [[t.name for t in r.inputs] for r in server.requests] == [["X"], ["X"]]
    assert await ens.execute(job(["OUT0"], B=ONES)) == {}  # OUT0 never comes: answered without it
    result = await ens.execute(job(["OUT0", "OUT1"], A=ONES, B=2 * ONES))
    np.testing.assert_array_equal(result["OUT1"], 2 * ONES)


async def streamed(sink: ResponseSink) -> list[float]:
    """The first value of OUT of each response a decoupled ensemble sent, up to its final one."""
    answers = []
    while True:
        item = await sink.get()
        if item.outputs:
            answers.append(float(item.outputs["OUT"][0, 0]))
        if item.final:
            return answers


@in_loop
async def test_a_decoupled_step_runs_the_rest_once_per_response() -> None:
    server = FakeServer(ANSWERS, decoupled={"double": 3})
    repeat = model("double", "X:TYPE_FP32:[4]", "Y:TYPE_FP32:[4]", decoupled=True)
    sink = ResponseSink()
    request = Job({"A": ONES}, ["OUT"], 1, request=InferenceRequest("ens"), sink=sink)
    assert await scheduler(CHAIN, {"double": repeat, "negate": NEGATE}, server).execute(request) == {}
    answers = await streamed(sink)
    assert sorted(answers) == [-4.0, -3.0, -2.0]
    assert [r.model_name for r in server.requests].count("negate") == 3


@in_loop
async def test_max_inflight_requests_bounds_each_step_across_requests() -> None:
    server = FakeServer(ANSWERS)
    server.gate = asyncio.Event()
    steps = [step("double", {"X": "A"}, {"Y": "doubled"}), step("negate", {"X": "doubled"}, {"Y": "OUT"})]
    cfg = ensemble(steps, extra="max_inflight_requests: 1")
    ens = scheduler(cfg, {"double": DOUBLE, "negate": NEGATE}, server)
    runs = [asyncio.ensure_future(ens.execute(job(["OUT"], A=ONES * i))) for i in range(4)]
    for _ in range(20):
        await asyncio.sleep(0)
    assert server.running == 1
    server.gate.set()
    results = await asyncio.gather(*runs)
    assert [float(r["OUT"][0, 0]) for r in results] == [0.0, -2.0, -4.0, -6.0]
    assert server.most_per_model == {"double": 1, "negate": 1}


@in_loop
async def test_a_cancelled_request_cancels_its_steps() -> None:
    server = FakeServer(ANSWERS)
    server.gate = asyncio.Event()
    run = asyncio.ensure_future(
        scheduler(CHAIN, {"double": DOUBLE, "negate": NEGATE}, server).execute(job(["OUT"], A=ONES))
    )
    while server.running < 1:
        await asyncio.sleep(0)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    await asyncio.sleep(0)
    assert server.running == 0
    assert len(server.requests) == 1  # the second step never started


def test_readiness_follows_the_composing_models() -> None:
    ens = scheduler(CHAIN, {"double": DOUBLE, "negate": NEGATE}, FakeServer(dict(ANSWERS)))
    assert ens.ready()
    ens.services.engine.answers.pop("negate")  # its own copy: the other tests keep ANSWERS whole
    assert not ens.ready()


# --- steps served elsewhere (services.external_models: another deployment of a Ray cluster)


class Elsewhere:
    """ExternalModels over a FakeServer of its own: the models it `serves`, sent without `internal`."""

    def __init__(self, names: set[str], server: FakeServer) -> None:
        self.names = names
        self.server = server
        self.up = True

    def serves(self, name: str) -> bool:
        return name in self.names

    async def config(self, name: str, versions: set[int]) -> Any:
        raise AssertionError("the scheduler never asks for configurations")

    def healthy(self, name: str, version: str = "") -> bool:
        return self.up

    async def infer(self, request: InferenceRequest) -> InferenceResponse:
        return await self.server.infer(request, internal=True)

    def infer_stream(self, request: InferenceRequest) -> AsyncIterator[InferenceResponse]:
        return self.server.infer_stream(request)


def split(composing: dict[str, Any], local: FakeServer, elsewhere: Elsewhere) -> EnsembleScheduler:
    services = BackendServices(engine=local, external_models=elsewhere)
    return EnsembleScheduler(EnsemblePlan(CHAIN, composing), CHAIN, services)


@in_loop
async def test_a_step_served_elsewhere_is_sent_there_and_the_rest_here() -> None:
    local, remote = FakeServer(ANSWERS), FakeServer(ANSWERS)
    elsewhere = Elsewhere({"double"}, remote)
    ens = split({"double": DOUBLE, "negate": NEGATE}, local, elsewhere)
    result = await ens.execute(job(["OUT"], A=ONES))
    np.testing.assert_array_equal(result["OUT"], -2 * ONES)
    assert [r.model_name for r in remote.requests] == ["double"]
    assert [r.model_name for r in local.requests] == ["negate"]
    assert ens.ready()
    elsewhere.up = False  # its deployment went away: the ensemble cannot answer
    assert not ens.ready()


@in_loop
async def test_a_decoupled_step_served_elsewhere_streams_from_there() -> None:
    local, remote = FakeServer(ANSWERS), FakeServer(ANSWERS, decoupled={"double": 2})
    repeat = model("double", "X:TYPE_FP32:[4]", "Y:TYPE_FP32:[4]", decoupled=True)
    ens = split({"double": repeat, "negate": NEGATE}, local, Elsewhere({"double"}, remote))
    sink = ResponseSink()
    request = Job({"A": ONES}, ["OUT"], 1, request=InferenceRequest("ens"), sink=sink)
    assert await ens.execute(request) == {}
    answers = await streamed(sink)
    assert sorted(answers) == [-3.0, -2.0]
    assert [r.model_name for r in remote.requests] == ["double"]
    assert [r.model_name for r in local.requests] == ["negate", "negate"]
