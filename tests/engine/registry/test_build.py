"""build.py: the instances a config asks for, what makes a reload rebuild a version, and load faults as errors."""

from __future__ import annotations

from engine.registry.registry_fakes import config
from modelhost.engine.registry.build import instance_plan, load_error, same_but_version_policy
from modelhost.errors import InvalidArgument, ModelhostError, OutOfMemory


def test_the_instance_plan_places_each_instance() -> None:
    cpu_gpu = config(
        "instance_group [ { count: 2 kind: KIND_CPU }, { count: 1 kind: KIND_GPU gpus: [1, 3] } ]"
    )
    plan = [(group.kind, index, device) for group, index, device in instance_plan(cpu_gpu, gpu_count=4)]
    assert plan == [(2, 0, 0), (2, 1, 0), (1, 0, 1), (1, 0, 3)]
    every_gpu = config("instance_group [ { count: 1 kind: KIND_GPU } ]")
    assert [d for _, _, d in instance_plan(every_gpu, gpu_count=2)] == [0, 1]


def test_only_a_change_besides_the_version_policy_rebuilds_a_version() -> None:
    base = config('backend: "onnxruntime" max_batch_size: 4')
    assert same_but_version_policy(
        base, config('backend: "onnxruntime" max_batch_size: 4 version_policy { all {} }')
    )
    assert not same_but_version_policy(base, config('backend: "onnxruntime" max_batch_size: 8'))
    assert not same_but_version_policy(None, base)


def test_load_faults_become_errors() -> None:
    assert isinstance(load_error("m", 1, MemoryError()), OutOfMemory)
    refused = InvalidArgument("bad input dims")
    assert load_error("m", 1, refused) is refused
    fault = load_error("m", 1, RuntimeError("boom"))
    assert type(fault) is ModelhostError and str(fault) == "RuntimeError: boom"
