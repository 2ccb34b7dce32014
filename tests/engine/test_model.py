"""One loaded model version (engine/model.py) with fake instances behind a real instance pool: the scheduler its
config picks, its metadata, a request answered end to end, requests in flight and draining, the cache name, the
labels it classifies with, and instance updates."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import pytest

from engine.registry.registry_fakes import config
from engine.scheduling.sequence_fakes import Manual, until
from modelhost.backends.api import Arrays, Job
from modelhost.engine.model import LoadedModel
from modelhost.engine.scheduling.dynamic_batcher import DynamicBatcher
from modelhost.engine.scheduling.instances import InstancePool
from modelhost.engine.scheduling.sequence_batcher import SequenceBatcher
from modelhost.errors import DecoupledModel, InvalidArgument
from modelhost.types import InferenceRequest, RequestedOutput, Tensor

# IN [3] FP32 -> OUT (= IN * 2) and SCORES (= IN), labelled by labels.txt; max_batch_size set by each test.
IO = (
    'backend: "fake" input [ { name: "IN" data_type: TYPE_FP32 dims: [ 3 ] } ] '
    'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 3 ] }, '
    '{ name: "SCORES" data_type: TYPE_FP32 dims: [ 3 ] label_filename: "labels.txt" } ]'
)
# A sequence model whose config lists its control input among its inputs too.
SEQUENCE = (
    'backend: "fake" max_batch_size: 0 '
    'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 3 ] }, '
    '{ name: "START" data_type: TYPE_INT32 dims: [ 1 ] } ] '
    'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 3 ] } ] '
    'sequence_batching { control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START '
    "int32_false_true: [ 0, 1 ] } ] } ] }"
)


class Doubler:
    """A batch-level instance: OUT = IN * 2 (as float64: the model's own type), SCORES = IN. Records the output
    names it was asked for; with `hold`, its executions wait (on its thread) until the test sets `go`."""

    def __init__(self, name: str = "doubler") -> None:
        self.name = name
        self.asked: list[list[str]] = []
        self.closed = False
        self.hold = False
        self.entered = threading.Event()
        self.go = threading.Event()

    def execute(self, inputs: Arrays, output_names: list[str]) -> Arrays:
        self.asked.append(list(output_names))
        if self.hold:
            self.entered.set()
            assert self.go.wait(30)
        values = inputs["IN"]
        every = {"OUT": values.astype(np.float64) * 2, "SCORES": values}
        return {n: every[n] for n in output_names}

    def close(self) -> None:
        self.closed = True


class FakeEnsemble:
    """An ensemble's scheduler: answers every request itself, ready while `is_ready`."""

    def __init__(self) -> None:
        self.jobs: list[Job] = []
        self.is_ready = True

    async def execute(self, job: Job, priority: int, timeout_us: int) -> Arrays:
        self.jobs.append(job)
        return {"OUT": job.inputs["IN"] * 2, "SCORES": job.inputs["IN"]}

    def queued(self) -> int:
        return 0

    def ready(self) -> bool:
        return self.is_ready


class Load(Protocol):
    def __call__(
        self, text: str, *instances: Any, ensemble: FakeEnsemble | None = None, **kw: Any
    ) -> LoadedModel: ...


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    """The model's directory, with the label file of SCORES."""
    (tmp_path / "labels.txt").write_text("a\nb\nc\n")
    return tmp_path


@pytest.fixture
def loaded(model_dir: Path) -> Iterator[Load]:
    """Version 1 of model "m" from the config's text, its instances behind a real pool; closed after the test."""
    models: list[LoadedModel] = []

    def load(text: str, *instances: Any, ensemble: FakeEnsemble | None = None, **kw: Any) -> LoadedModel:
        model = LoadedModel("m", 1, config(text), model_dir, InstancePool(list(instances)), ensemble, **kw)
        models.append(model)
        return model

    yield load
    for model in models:
        model.close()


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    """A test's coroutine, on a loop of its own; one a fault leaves waiting forever (a drain, a retirement that
    never ends) fails after 30 s instead of hanging the suite."""
    return asyncio.run(asyncio.wait_for(coro, 30))


def request(
    *rows: list[float], outputs: tuple[RequestedOutput, ...] = (), batching: bool = True, **parameters: Any
) -> InferenceRequest:
    data: npt.NDArray[Any] = np.array(rows if batching else rows[0], dtype=np.float32)
    return InferenceRequest(
        "m",
        id="r1",
        inputs=[Tensor("IN", "FP32", list(data.shape), data)],
        outputs=list(outputs),
        parameters=parameters,
    )


# -- the scheduler the config picks -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, scheduler",
    [
        (f"{IO} max_batch_size: 4", None),
        (f"{IO} max_batch_size: 4 dynamic_batching {{ }}", DynamicBatcher),
        # Triton accepts dynamic_batching on a model that does not batch, and does not batch it.
        (f"{IO} max_batch_size: 0 dynamic_batching {{ }}", None),
        (f"{IO} max_batch_size: 4 sequence_batching {{ }}", SequenceBatcher),
        (f"{IO} max_batch_size: 0 sequence_batching {{ }}", SequenceBatcher),
    ],
    ids=["none", "dynamic", "dynamic without batching", "sequence", "sequence without batching"],
)
def test_the_config_picks_the_scheduler(loaded: Load, text: str, scheduler: type | None) -> None:
    model = loaded(text, Doubler())
    if scheduler is None:
        assert model.batcher is None
    else:
        assert type(model.batcher) is scheduler
    assert model.ensemble is None and model.ragged is None


def test_an_ensemble_schedules_its_own_requests(loaded: Load) -> None:
    steps = FakeEnsemble()
    model = loaded(f'{IO} platform: "ensemble" max_batch_size: 4 dynamic_batching {{ }}', ensemble=steps)
    assert model.batcher is steps and model.ensemble is steps
    assert len(model.pool) == 0


def test_ragged_inputs_are_batched_by_the_model_only_without_a_batcher(loaded: Load) -> None:
    ragged = IO.replace("dims: [ 3 ] }", "dims: [ -1 ] allow_ragged_batch: true }", 1) + " max_batch_size: 4"
    assert loaded(ragged, Doubler()).ragged is not None
    assert loaded(f"{ragged} dynamic_batching {{ }}", Doubler()).ragged is None
    assert loaded(ragged, Manual()).ragged is None  # request-level instances see requests one by one


# -- metadata ------------------------------------------------------------------------------------------------


def test_metadata_with_batching_has_a_leading_variable_dimension(loaded: Load) -> None:
    assert loaded(f"{IO} max_batch_size: 8", Doubler()).metadata() == {
        "platform": "fake",
        "inputs": [{"name": "IN", "datatype": "FP32", "shape": [-1, 3]}],
        "outputs": [
            {"name": "OUT", "datatype": "FP32", "shape": [-1, 3]},
            {"name": "SCORES", "datatype": "FP32", "shape": [-1, 3]},
        ],
    }


def test_metadata_without_batching_leaves_the_control_inputs_out(loaded: Load) -> None:
    assert loaded(SEQUENCE, Doubler()).metadata() == {
        "platform": "fake",
        "inputs": [{"name": "IN", "datatype": "FP32", "shape": [3]}],  # START is the server's to feed
        "outputs": [{"name": "OUT", "datatype": "FP32", "shape": [3]}],
    }


def test_the_platform_is_the_configs_or_else_its_backend(loaded: Load) -> None:
    model = loaded(f'{IO} platform: "onnxruntime_onnx"', Doubler())
    assert model.metadata()["platform"] == "onnxruntime_onnx"


# -- a request end to end ------------------------------------------------------------------------------------


def test_a_request_is_answered_in_the_config_types(loaded: Load) -> None:
    instance = Doubler()
    model = loaded(f"{IO} max_batch_size: 4", instance)

    async def go() -> None:
        response, timing = await model.infer(request([1, 2, 3], [4, 5, 6]))
        assert (response.model_name, response.model_version, response.id) == ("m", "1", "r1")
        assert [(t.name, t.datatype, t.shape) for t in response.outputs] == [
            ("OUT", "FP32", [2, 3]),
            ("SCORES", "FP32", [2, 3]),
        ]
        out = response.outputs[0].data
        # The model gave float64: a batch-level model's outputs go out in the config's type.
        assert out.dtype == np.float32
        assert out.tolist() == [[2, 4, 6], [8, 10, 12]]
        assert response.parameters == {}
        assert timing.infer_ns >= 0 and timing.input_ns >= 0

    run(go())
    assert instance.asked == [["OUT", "SCORES"]]  # every output when the request names none
    # Without a batcher the model counts the execution itself.
    assert model.stats.execution_count == 1 and model.stats.inference_count == 2


def test_only_the_requested_outputs_are_computed_and_answered(loaded: Load) -> None:
    instance = Doubler()
    model = loaded(f"{IO} max_batch_size: 4", instance)
    response, _ = run(model.infer(request([1, 2, 3], outputs=(RequestedOutput("SCORES"),))))
    assert [t.name for t in response.outputs] == ["SCORES"]
    assert instance.asked == [["SCORES"]]


def test_a_classification_answers_the_top_classes_with_their_labels(loaded: Load) -> None:
    model = loaded(f"{IO} max_batch_size: 4", Doubler())
    wanted = (RequestedOutput("SCORES", classification=2), RequestedOutput("OUT", classification=1))
    response, _ = run(model.infer(request([0.1, 0.7, 0.2], outputs=wanted)))
    scores, out = response.outputs
    assert (scores.datatype, scores.shape) == ("BYTES", [1, 2])
    assert scores.data.tolist() == [[b"0.700000:1:b", b"0.200000:2:c"]]
    assert (out.datatype, out.data.tolist()) == ("BYTES", [[b"1.400000:1"]])  # OUT has no labels


def test_a_reshaped_output_is_answered_in_its_config_shape(loaded: Load) -> None:
    text = (
        'backend: "fake" max_batch_size: 4 input [ { name: "IN" data_type: TYPE_FP32 dims: [ 3 ] } ] '
        'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 3, 1 ] reshape { shape: [ 3 ] } } ]'
    )
    response, _ = run(loaded(text, Doubler()).infer(request([1, 2, 3], [4, 5, 6])))
    assert response.outputs[0].shape == [2, 3, 1]
    assert response.outputs[0].data.shape == (2, 3, 1)


def test_a_python_models_outputs_keep_the_type_it_gave_them_and_may_be_left_out(loaded: Load) -> None:
    stub = Manual()
    model = loaded(f"{IO} max_batch_size: 4", stub)
    assert model.outputs_typed_by_model

    async def go() -> None:
        answer = asyncio.create_task(model.infer(request([1, 2, 3])))
        await until(lambda: len(stub.calls) == 1)
        stub.answer(0, {"OUT": np.array([[1, 2, 3]], dtype=np.int64)})  # no SCORES
        response, _ = await answer
        assert [(t.name, t.datatype) for t in response.outputs] == [("OUT", "INT64")]
        assert response.outputs[0].data.dtype == np.int64

    run(go())


def test_a_refused_request_is_refused_before_it_is_queued(loaded: Load) -> None:
    instance = Doubler()
    model = loaded(f"{IO} max_batch_size: 4", instance)
    wrong = InferenceRequest("m", inputs=[Tensor("NOPE", "FP32", [1, 3], np.zeros((1, 3), np.float32))])
    with pytest.raises(InvalidArgument, match="unexpected inference input 'NOPE' for model 'm'"):
        model.check_request(wrong)
    with pytest.raises(InvalidArgument, match="unexpected inference output 'NOPE' for model 'm'"):
        model.check_request(request([1, 2, 3], outputs=(RequestedOutput("NOPE"),)))
    with pytest.raises(InvalidArgument, match="unexpected inference input 'NOPE' for model 'm'"):
        run(model.infer(wrong))
    assert model.in_flight == 0 and not model.busy  # counted out again
    assert instance.asked == []


def test_a_decoupled_model_is_refused_by_infer(loaded: Load) -> None:
    model = loaded(f"{IO} max_batch_size: 4 model_transaction_policy {{ decoupled: true }}", Doubler())
    assert model.decoupled
    with pytest.raises(DecoupledModel):
        run(model.infer(request([1, 2, 3])))
    assert model.in_flight == 0


def test_an_ensemble_counts_one_execution_per_request_and_is_ready_with_its_steps(loaded: Load) -> None:
    steps = FakeEnsemble()
    model = loaded(f'{IO} platform: "ensemble" max_batch_size: 4', ensemble=steps)

    async def go() -> None:
        response, _ = await model.infer(request([1, 2, 3], [4, 5, 6]))
        assert response.outputs[0].data.tolist() == [[2, 4, 6], [8, 10, 12]]
        assert await model.ready() and model.healthy
        steps.is_ready = False
        assert not await model.ready() and not model.healthy

    run(go())
    assert len(steps.jobs) == 1 and steps.jobs[0].batch_size == 2
    assert model.stats.execution_count == 1 and model.stats.inference_count == 2


# -- requests in flight --------------------------------------------------------------------------------------


def test_requests_in_flight_are_counted_and_drained_waits_for_them(loaded: Load) -> None:
    stub = Manual()  # answers only when told
    model = loaded(f"{IO} max_batch_size: 4", stub)

    async def go() -> None:
        await model.drained()  # nothing in flight: at once
        assert model.in_flight == 0 and not model.busy
        first = asyncio.create_task(model.infer(request([1, 2, 3])))
        second = asyncio.create_task(model.infer(request([4, 5, 6])))
        await until(lambda: len(stub.calls) == 1)
        assert model.busy and model.in_flight == 2
        assert model.stats.pending() == 1  # the second waits for the one instance
        drained = asyncio.create_task(model.drained())
        stub.answer(0)
        await first
        await until(lambda: len(stub.calls) == 2)
        assert model.in_flight == 1 and model.stats.pending() == 0
        assert not drained.done()
        stub.answer(1)
        await second
        await drained
        assert model.in_flight == 0 and not model.busy
        await model.drained()  # and again, at once

    run(go())


def test_a_failed_request_leaves_the_count_too(loaded: Load) -> None:
    stub = Manual()
    model = loaded(f"{IO} max_batch_size: 4", stub)

    async def go() -> None:
        failing = asyncio.create_task(model.infer(request([1, 2, 3])))
        await until(lambda: len(stub.calls) == 1)
        drained = asyncio.create_task(model.drained())
        stub.answer(0, RuntimeError("model failed"))
        with pytest.raises(RuntimeError, match="model failed"):
            await failing
        await drained
        assert model.in_flight == 0 and not model.busy

    run(go())


def test_a_batched_request_running_on_its_instance_is_in_flight(loaded: Load) -> None:
    instance = Doubler()
    instance.hold = True
    model = loaded(f"{IO} max_batch_size: 4 dynamic_batching {{ }}", instance)

    async def go() -> None:
        running = asyncio.create_task(model.infer(request([1, 2, 3])))
        await until(instance.entered.is_set)
        assert model.busy and model.in_flight == 1
        drained = asyncio.create_task(model.drained())
        await asyncio.sleep(0)
        assert not drained.done()
        instance.go.set()
        await running
        await drained
        assert not model.busy

    run(go())
    assert model.stats.execution_count == 1  # counted by the batcher, once


def test_a_live_sequence_keeps_its_version_busy(loaded: Load) -> None:
    model = loaded(SEQUENCE, Doubler())
    later = request([1, 2, 3], batching=False, sequence_id=7)

    async def go() -> None:
        await model.infer(request([1, 2, 3], batching=False, sequence_id=7, sequence_start=True))
        # Answered, but the sequence holds its slot: the version is busy until it ends (as Triton counts it).
        assert model.busy and model.in_flight == 1
        assert model.continues_sequence(later)
        await model.infer(request([1, 2, 3], batching=False, sequence_id=7, sequence_end=True))
        assert not model.busy and model.in_flight == 0
        assert not model.continues_sequence(later)
        model.close()  # the sequence batcher's tasks end with the loop

    run(go())


# -- construction --------------------------------------------------------------------------------------------


def test_the_cache_name_carries_the_namespace(loaded: Load) -> None:
    plain = loaded(f"{IO} max_batch_size: 4", Doubler())
    assert plain.cache_name == "m" and plain.stats.namespace == "" and not plain.stats.cached
    assert plain.placements == []
    namespaced = loaded(
        f"{IO} max_batch_size: 4", Doubler(), namespace="repo_a", cached=True, placements=[("sig", "i")]
    )
    assert namespaced.cache_name == "repo_a/m"  # two repositories' models of one name share no answers
    assert namespaced.stats.namespace == "repo_a" and namespaced.stats.cached
    assert namespaced.placements == [("sig", "i")]


def test_inherited_labels_fill_only_outputs_without_labels_of_their_own(loaded: Load) -> None:
    inherited = {"OUT": ["x", "y", "z"], "SCORES": ["not", "these"], "ABSENT": ["ignored"]}
    model = loaded(
        f'{IO} platform: "ensemble" max_batch_size: 4', ensemble=FakeEnsemble(), inherited_labels=inherited
    )
    assert model.labels == {"OUT": ["x", "y", "z"], "SCORES": ["a", "b", "c"]}
    response, _ = run(model.infer(request([3, 1, 2], outputs=(RequestedOutput("OUT", classification=1),))))
    assert response.outputs[0].data.tolist() == [[b"6.000000:0:x"]]


# -- instance updates ----------------------------------------------------------------------------------------


def test_instances_added_serve_and_retired_ones_close(loaded: Load) -> None:
    first, added = Doubler("first"), Doubler("added")
    model = loaded(f"{IO} max_batch_size: 4", first)

    async def go() -> None:
        model.add_instances([added], None)
        assert [w.instance for w in model.pool.workers] == [first, added]
        assert model.sequences_by_instance() == {}  # no sequence batcher
        tasks = model.retire_instances([first])
        assert len(tasks) == 1
        await asyncio.gather(*tasks)
        assert first.closed and not added.closed
        assert [w.instance for w in model.pool.workers] == [added]
        await model.infer(request([1, 2, 3]))
        assert len(added.asked) == 1 and first.asked == []

    run(go())
    model.close()
    assert added.closed


def test_a_retired_instance_of_a_sequence_model_closes_after_its_last_sequence(loaded: Load) -> None:
    first, added = Doubler("first"), Doubler("added")
    model = loaded(SEQUENCE, first)  # one slot per instance

    def step(corrid: int, **flags: bool) -> Coroutine[Any, Any, Any]:
        return model.infer(request([1, 2, 3], batching=False, sequence_id=corrid, **flags))

    async def go() -> None:
        await step(1, sequence_start=True)
        model.add_instances([added], None)
        await step(2, sequence_start=True)  # the first instance's slot is taken: on the added one
        assert model.sequences_by_instance() == {id(first): 1, id(added): 1}
        (retired,) = model.retire_instances([first])
        await step(1)  # sequence 1 goes on where it is
        assert len(first.asked) == 2
        assert not retired.done() and not first.closed
        await step(1, sequence_end=True)
        await retired
        assert first.closed
        assert model.sequences_by_instance() == {id(added): 1}
        await step(2, sequence_end=True)
        assert len(added.asked) == 2
        model.close()

    run(go())
