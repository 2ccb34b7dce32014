"""What `modelhost tune` varies: a Variant (one model configuration), the Space of values for a model on a host,
and the config a variant makes of the model's own config.

A variant changes only the fields the tuner sweeps; everything else in the user's config (inputs, outputs,
optimization, priorities, ...) is kept, so the written config.pbtxt differs from the current one in those fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInstanceGroup

from modelhost.config.invalid import InvalidConfig
from modelhost.config.normalize import normalize_config
from modelhost.config.validate import check_config

KIND_CPU = "KIND_CPU"
KIND_GPU = "KIND_GPU"

# Model Analyzer's automatic sweep ranges (config_defaults.py): instances 1-5, max_batch_size 1-128 and
# concurrency 1-1024, powers of two.
MAX_INSTANCE_COUNT = 5
MAX_MODEL_BATCH_SIZE = 128
MAX_CONCURRENCY = 1024
QUEUE_DELAYS_US = (0, 100, 500, 1000, 2000)

# The one backend parameter that sets a backend's CPU threads, and what "unset" means for it.
THREAD_PARAMETERS = {
    "onnxruntime": "intra_op_thread_count",  # 0 = ONNX Runtime's default; unset = modelhost's share of the cores
    "openvino": "NUM_STREAMS",  # unset = one stream per instance
}


@dataclass(frozen=True, slots=True, order=True)
class Variant:
    """One model configuration: the values of the swept fields."""

    instances: int
    kind: str  # KIND_CPU | KIND_GPU
    max_batch_size: int
    dynamic_batching: bool
    queue_delay_us: int = 0
    preferred: tuple[int, ...] = ()  # () = Triton's default, [max_batch_size]
    threads: str = ""  # the backend's thread parameter; "" = not set

    @property
    def key(self) -> str:
        """A stable name for checkpoints (every field, fixed order)."""
        parts = [f"{self.instances}x{self.kind.removeprefix('KIND_')}", f"mbs{self.max_batch_size}"]
        if self.dynamic_batching:
            parts.append(f"db{self.queue_delay_us}")
            if self.preferred:
                parts.append("pref" + ".".join(str(p) for p in self.preferred))
        if self.threads:
            parts.append(f"thr{self.threads}")
        return "-".join(parts)

    def describe(self, thread_parameter: str | None = None) -> str:
        """What a person reads: `2 x CPU, max_batch_size 64, dynamic batching (delay 100 us)`."""
        parts = [
            f"{self.instances} x {self.kind.removeprefix('KIND_')}",
            f"max_batch_size {self.max_batch_size}",
        ]
        if self.dynamic_batching:
            batching = f"dynamic batching (delay {self.queue_delay_us} us"
            if self.preferred:
                batching += ", preferred " + ",".join(str(p) for p in self.preferred)
            parts.append(batching + ")")
        elif self.max_batch_size > 0:
            parts.append("no dynamic batching")
        if self.threads:
            parts.append(f"{thread_parameter or 'threads'} {self.threads}")
        return ", ".join(parts)

    @property
    def instance_group(self) -> str:
        """Model Analyzer's "Instance Group" column: `2:CPU`."""
        return f"{self.instances}:{self.kind.removeprefix('KIND_')}"

    def to_json(self) -> dict[str, object]:
        return {
            "instances": self.instances,
            "kind": self.kind,
            "max_batch_size": self.max_batch_size,
            "dynamic_batching": self.dynamic_batching,
            "queue_delay_us": self.queue_delay_us,
            "preferred": list(self.preferred),
            "threads": self.threads,
        }

    @classmethod
    def from_json(cls, data: dict[str, object]) -> Variant:
        preferred = data.get("preferred", [])
        assert isinstance(preferred, list)
        return cls(
            instances=int(str(data["instances"])),
            kind=str(data["kind"]),
            max_batch_size=int(str(data["max_batch_size"])),
            dynamic_batching=bool(data["dynamic_batching"]),
            queue_delay_us=int(str(data.get("queue_delay_us", 0))),
            preferred=tuple(int(p) for p in preferred),
            threads=str(data.get("threads", "")),
        )


def _powers_of_two(low: int, high: int) -> list[int]:
    values, value = [], 1
    while value <= high:
        if value >= low:
            values.append(value)
        value *= 2
    return values


@dataclass(frozen=True, slots=True)
class Space:
    """The values each swept field may take for one model on one host."""

    instances: list[int]
    kinds: list[str]
    batch_sizes: list[int]  # [0] for a model that cannot batch
    batching: bool  # whether dynamic batching may be switched on (a batching model with no sequence batcher)
    queue_delays: list[int]
    thread_parameter: str | None
    thread_values: list[str]  # "" (unset) first
    concurrencies: list[int] = field(default_factory=list)

    def preferred_options(self, max_batch_size: int) -> list[tuple[int, ...]]:
        """Triton's default ([max_batch_size]) and half of it: a batcher that may send at half size waits
        less under light load."""
        options: list[tuple[int, ...]] = [()]
        if max_batch_size >= 4:
            options.append((max_batch_size // 2, max_batch_size))
        return options

    def contains(self, variant: Variant) -> bool:
        return (
            variant.instances in self.instances
            and variant.kind in self.kinds
            and variant.max_batch_size in self.batch_sizes
            and (self.batching or not variant.dynamic_batching)
            and (not variant.dynamic_batching or variant.queue_delay_us in self.queue_delays)
            and variant.threads in self.thread_values
        )


def base_variant(config: ModelConfig) -> Variant:
    """The variant a config already is (its first instance group; the dynamic batcher's delay and preferred
    sizes; the backend's thread parameter)."""
    group = config.instance_group[0] if config.instance_group else None
    count = group.count if group is not None and group.count > 0 else 1
    kind = KIND_GPU if group is not None and group.kind == ModelInstanceGroup.KIND_GPU else KIND_CPU
    batcher = config.dynamic_batching if config.HasField("dynamic_batching") else None
    preferred: tuple[int, ...] = ()
    if batcher is not None:
        sizes = tuple(int(s) for s in batcher.preferred_batch_size)
        preferred = () if sizes in ((), (config.max_batch_size,)) else sizes
    parameter = THREAD_PARAMETERS.get(backend_name(config))
    threads = ""
    if parameter is not None and parameter in config.parameters:
        threads = config.parameters[parameter].string_value
    return Variant(
        instances=count,
        kind=kind,
        max_batch_size=int(config.max_batch_size),
        dynamic_batching=batcher is not None,
        queue_delay_us=int(batcher.max_queue_delay_microseconds) if batcher is not None else 0,
        preferred=preferred,
        threads=threads,
    )


def backend_name(config: ModelConfig) -> str:
    if config.backend:
        return str(config.backend)
    platform = str(config.platform)
    if platform == "onnxruntime_onnx":
        return "onnxruntime"
    if platform == "openvino":
        return "openvino"
    return platform


def build_space(
    config: ModelConfig,
    *,
    gpu_count: int,
    cores: int,
    max_instance_count: int = MAX_INSTANCE_COUNT,
    max_model_batch_size: int = MAX_MODEL_BATCH_SIZE,
    max_concurrency: int = MAX_CONCURRENCY,
) -> Space:
    """The values worth trying for this model on this host. A host without a GPU gets KIND_CPU only (Model
    Analyzer forces KIND_GPU there: model_analyzer#927)."""
    base = base_variant(config)
    kinds = [KIND_CPU]
    if gpu_count > 0 and backend_name(config) not in {"python", "openvino", "fil"}:
        kinds = [KIND_GPU, KIND_CPU] if base.kind == KIND_GPU else [KIND_CPU, KIND_GPU]
    can_batch = config.max_batch_size > 0
    batch_sizes = _powers_of_two(1, max_model_batch_size) if can_batch else [0]
    if can_batch and base.max_batch_size not in batch_sizes:
        batch_sizes = sorted({*batch_sizes, base.max_batch_size})
    parameter = THREAD_PARAMETERS.get(backend_name(config))
    thread_values = [""]
    if parameter is not None:
        thread_values += [str(n) for n in sorted({1, *_powers_of_two(2, cores), cores})]
    if base.threads and base.threads not in thread_values:
        thread_values.append(base.threads)
    delays = list(QUEUE_DELAYS_US)
    if base.dynamic_batching and base.queue_delay_us not in delays:
        delays = sorted({*delays, base.queue_delay_us})
    instances = list(range(1, max(max_instance_count, 1) + 1))
    if base.instances not in instances:
        instances.append(base.instances)
    return Space(
        instances=instances,
        kinds=kinds,
        batch_sizes=batch_sizes,
        batching=can_batch and not config.HasField("sequence_batching"),
        queue_delays=delays,
        thread_parameter=parameter,
        thread_values=thread_values,
        concurrencies=_powers_of_two(1, max_concurrency),
    )


def apply(variant: Variant, base: ModelConfig, thread_parameter: str | None) -> ModelConfig:
    """`base` with the variant's values in the swept fields (a new message; `base` is not changed)."""
    config = ModelConfig()
    config.CopyFrom(base)
    if not config.instance_group:
        config.instance_group.add()
    group = config.instance_group[0]
    group.count = variant.instances
    group.kind = ModelInstanceGroup.KIND_GPU if variant.kind == KIND_GPU else ModelInstanceGroup.KIND_CPU
    if variant.kind == KIND_CPU:
        del group.gpus[:]
    config.max_batch_size = variant.max_batch_size
    if variant.dynamic_batching:
        batcher = config.dynamic_batching
        batcher.SetInParent()
        batcher.max_queue_delay_microseconds = variant.queue_delay_us
        del batcher.preferred_batch_size[:]
        batcher.preferred_batch_size.extend(variant.preferred)
    else:
        config.ClearField("dynamic_batching")
    if thread_parameter is not None:
        if variant.threads:
            config.parameters[thread_parameter].string_value = variant.threads
        elif thread_parameter in config.parameters:
            del config.parameters[thread_parameter]
    return config


def problem(
    variant: Variant, served: ModelConfig, gpu_count: int, thread_parameter: str | None
) -> str | None:
    """Why the server would refuse this variant, or None: the checks it applies to a config before loading it
    (normalisation, then every rule), on the served (completed) config with the variant's values. Model Analyzer
    loads what it generates unchecked and ends with "profiled 0 configurations" (model_analyzer#562, #957)."""
    config = apply(variant, served, thread_parameter)
    try:
        normalize_config(config, served.name, gpu_count=gpu_count)
        check_config(config, served.name, gpu_count)
    except InvalidConfig as error:
        return error.message
    return None
