"""Building a model version: its instance plan, its instances (one after the other, or in parallel), and a fault
while building as the error that fails the version."""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Callable, Mapping
from typing import Any

from modelhost.backends.api import BackendContext, ModelInstance
from modelhost.engine.model import LoadedModel
from modelhost.engine.registry.model_memory import is_out_of_memory
from modelhost.errors import ModelhostError, OutOfMemory
from modelhost.host.host_policy import Placement, bound, policy_name, remember

log = logging.getLogger("modelhost.registry")


def instance_plan(config: Any, gpu_count: int) -> list[tuple[Any, int, int]]:
    """(group, index within group, device id) for every instance the config asks for."""
    plan: list[tuple[Any, int, int]] = []
    for group in config.instance_group:
        kind = group.DESCRIPTOR.fields_by_name["kind"].enum_type.values_by_number[group.kind].name
        count = max(1, int(group.count))
        if kind == "KIND_GPU":
            gpus = list(group.gpus) or list(range(gpu_count)) or [0]
            for gpu in gpus:
                plan.extend((group, i, gpu) for i in range(count))
        else:
            plan.extend((group, i, 0) for i in range(count))
    return plan


def load_error(name: str, version: int, error: BaseException) -> ModelhostError:
    """A fault while loading a version as the error that fails it: out of memory where it says so."""
    if isinstance(error, OutOfMemory):
        return error
    if isinstance(error, MemoryError):
        return OutOfMemory(f"MemoryError: out of memory while loading '{name}' version {version}")
    if isinstance(error, ModelhostError):
        return OutOfMemory(str(error)) if is_out_of_memory(str(error)) else error
    log.exception("failed to load '%s' version %d", name, version, exc_info=error)
    message = f"{type(error).__name__}: {error}"
    return OutOfMemory(message) if is_out_of_memory(message) else ModelhostError(message)


def fault_as_error(build: Callable[..., LoadedModel], *args: Any) -> LoadedModel:
    """A fault while building a model version fails that version only, with the fault as its reason."""
    try:
        return build(*args)
    except ModelhostError:
        raise
    except Exception as e:
        log.exception("failed to build model '%s'", args[0])
        raise ModelhostError(f"{type(e).__name__}: {e}") from e


def built_instances(
    backend: Any,
    ctx: BackendContext,
    plan: list[tuple[Any, int, int]],
    host_policies: Mapping[str, Placement] | None = None,
) -> list[Any]:
    """The instances of the plan, in its order: built one after the other, or all at once on threads of their
    own for a backend with `parallel_instances` (a python model's instances each initialize in their own
    process), as Triton builds them. Where one fails, those built are closed and its error raised.

    `host_policies`: an instance whose group follows one is built on a thread bound to it (what the framework
    starts meanwhile, its thread pools or a stub process, inherits it), and remembered for its worker thread."""
    policies = host_policies or {}

    def build(group: Any, index: int, device: int) -> Any:
        placement = policies.get(policy_name(group, device))
        with bound(placement):
            instance = backend.load_instance(ctx, group, index, device)
        remember(instance, placement)
        return instance

    if len(plan) < 2 or not getattr(backend, "parallel_instances", False):
        built: list[Any] = []
        try:
            for group, index, device in plan:
                built.append(build(group, index, device))
        except BaseException:
            for instance in built:
                instance.close()
            raise
        return built
    with concurrent.futures.ThreadPoolExecutor(
        len(plan), thread_name_prefix=f"load-{ctx.model_name}"
    ) as pool:
        futures = [pool.submit(build, g, i, d) for g, i, d in plan]
        concurrent.futures.wait(futures)
    errors = [e for e in (f.exception() for f in futures) if e is not None]
    if errors:
        for future in futures:
            if future.exception() is None:
                future.result().close()
        raise errors[0]
    return [future.result() for future in futures]


def close_all(instances: list[ModelInstance]) -> None:
    for instance in instances:
        instance.close()


def same_but_version_policy(old: Any, new: Any) -> bool:
    """Triton loads a serving version again on a configuration change other than its version_policy (and its
    instance groups, which it updates in place: `_regroup`)."""
    if old is None:
        return False
    if old.version_policy == new.version_policy:
        return bool(old == new)
    left, right = type(old)(), type(new)()
    left.CopyFrom(old)
    right.CopyFrom(new)
    left.ClearField("version_policy")
    right.ClearField("version_policy")
    return bool(left == right)
