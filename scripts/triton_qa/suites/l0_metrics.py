"""qa/L0_metrics: CPU metrics (cpu_metrics_test.py), pinned memory metrics, --metrics-config (counters, summaries,
cache metrics, custom quantiles: metrics_config_test.py), model namespacing labels, and the pending-request gauge
of every scheduler (metrics_queue_size_test.py)."""

from __future__ import annotations

import shutil

from triton_qa import models
from triton_qa.core import CPP_CLIENT, GPU, Config, LeftOut, Run, Suite, SuiteContext
from triton_qa.suites._common import fresh

PYTHON_TEST = "metrics_config_test.py"
NOT_PLANNED_PINNED = "pinned memory metrics: not planned (compatibility.md: no pinned memory pool)"
NOT_YET_NAMESPACING = "--model-namespacing: not yet (compatibility.md)"
MAX_BATCH_SIZE = 4
MAX_QUEUE_DELAY_US = 100000


def setup_cpu(ctx: SuiteContext) -> None:
    model = "libtorch_float32_float32_float32"
    dest = fresh(ctx.path("models")) / model
    shutil.copytree(ctx.data("qa_model_repository") / model, dest)
    for v in dest.iterdir():
        if v.is_dir() and v.name != "1":
            shutil.rmtree(v)
    models.sed(models.config(dest), r"label_filename:.*", "")
    models.append(models.config(dest), "instance_group [{ kind: KIND_GPU }]")


def setup_unit(ctx: SuiteContext) -> None:
    for name in ("identity_cache_on", "identity_cache_off"):
        ctx.path(f"unit_test_models/{name}/1").mkdir(parents=True, exist_ok=True)


def setup_namespacing(ctx: SuiteContext) -> None:
    for repo in ("addsub_repo/addsub_ensemble", "subadd_repo/subadd_ensemble"):
        ctx.path(f"model_namespacing_repos/{repo}/1").mkdir(parents=True, exist_ok=True)


def setup_queue(ctx: SuiteContext) -> None:
    repo = fresh(ctx.path("queue_size_models"))
    default = repo / "default"
    shutil.copytree(ctx.path("identity_delay"), default)
    (default / "1").mkdir()
    models.sed(models.config(default), r"^max_batch_size.*", f"max_batch_size: {MAX_BATCH_SIZE}")
    extras = {
        "dynamic": f"dynamic_batching {{ max_queue_delay_microseconds: {MAX_QUEUE_DELAY_US} }}",
        "max_queue_size": f"dynamic_batching {{ max_queue_delay_microseconds: {MAX_QUEUE_DELAY_US} "
        "default_queue_policy { max_queue_size: 4 } }",
        "sequence_direct": f"sequence_batching {{ direct {{ max_queue_delay_microseconds: {MAX_QUEUE_DELAY_US}, "
        "minimum_slot_utilization: 1.0 } }",
        "sequence_oldest": f"sequence_batching {{ oldest {{ max_queue_delay_microseconds: {MAX_QUEUE_DELAY_US}, "
        f"max_candidate_sequences: {MAX_BATCH_SIZE} }} }}",
    }
    for name, extra in extras.items():
        shutil.copytree(default, repo / name)
        models.append(models.config(repo / name), f"\n{extra}\n")
    shutil.copytree(ctx.path("ensemble_delay"), repo / "ensemble")
    (repo / "ensemble" / "1").mkdir(exist_ok=True)
    shutil.copytree(default, repo / "default_composing")
    shutil.copytree(repo / "dynamic", repo / "dynamic_composing")


def _mc(*tests: str) -> list[Run]:
    return [Run(PYTHON_TEST, [f"MetricsConfigTest.{t}"]) for t in tests]


def configs(ctx: SuiteContext) -> list[Config]:
    base = f"--model-repository={ctx.work}/models"
    unit = [f"--model-repository={ctx.work}/unit_test_models", "--model-control-mode=explicit"]
    repos = ctx.work / "model_namespacing_repos"
    out = [
        Config(
            name="cpu_metrics",
            args=[base, "--metrics-interval-ms=1000", "--log-verbose=1"],
            setup=setup_cpu,
            steps=[Run("cpu_metrics_test.py", pytest=True)],
        ),
        Config(
            name="pinned_memory_metrics",
            args=[base, "--metrics-interval-ms=1", "--model-control-mode=explicit", "--log-verbose=1"],
            setup=setup_cpu,
            steps=[
                *_mc("test_pinned_memory_metrics_exist"),
                Run("pinned_memory_metrics_test.py", pytest=True),
            ],
            known={"*pinned_memory*": NOT_PLANNED_PINNED},
        ),
        Config(
            name="custom_pinned_memory_pool",
            args=[
                base,
                "--metrics-interval-ms=1",
                "--model-control-mode=explicit",
                "--log-verbose=1",
                "--pinned-memory-pool-byte-size=1024",
            ],
            setup=setup_cpu,
            env={"CUSTOM_PINNED_MEMORY_POOL_SIZE": "1024"},
            steps=[Run("pinned_memory_metrics_test.py", pytest=True)],
            known={"*pinned_memory*": NOT_PLANNED_PINNED},
        ),
        Config(
            name="counters-only",
            args=[*unit, "--load-model=identity_cache_off"],
            setup=setup_unit,
            steps=_mc(
                "test_inf_counters_exist",
                "test_inf_summaries_missing",
                "test_cache_counters_missing",
                "test_cache_summaries_missing",
            ),
        ),
        Config(
            name="summary_latencies",
            args=[*unit, "--load-model=identity_cache_off", "--metrics-config", "summary_latencies=true"],
            setup=setup_unit,
            steps=_mc(
                "test_inf_counters_exist",
                "test_inf_summaries_exist",
                "test_cache_counters_missing",
                "test_cache_summaries_missing",
            ),
        ),
        Config(
            name="summaries-without-counters",
            args=[
                *unit,
                "--load-model=identity_cache_off",
                "--metrics-config",
                "summary_latencies=true",
                "--metrics-config",
                "counter_latencies=false",
            ],
            setup=setup_unit,
            steps=_mc(
                "test_inf_counters_missing",
                "test_inf_summaries_exist",
                "test_cache_counters_missing",
                "test_cache_summaries_missing",
            ),
        ),
        Config(
            name="cache",
            args=[
                *unit,
                "--cache-config",
                "local,size=1048576",
                "--load-model=identity_cache_on",
                "--metrics-config",
                "summary_latencies=true",
                "--metrics-config",
                "counter_latencies=true",
            ],
            setup=setup_unit,
            steps=_mc(
                "test_inf_counters_exist",
                "test_inf_summaries_exist_with_cache",
                "test_cache_counters_exist",
                "test_cache_summaries_exist",
            ),
        ),
        Config(
            name="summary_quantiles",
            args=[
                *unit,
                "--load-model=identity_cache_off",
                "--metrics-config",
                "summary_latencies=true",
                "--metrics-config",
                "summary_quantiles=0.1:0.0.1,0.7:0.01,0.75:0.01",
            ],
            setup=setup_unit,
            env={"SUMMARY_QUANTILES": "0.1:0.0.1,0.7:0.01,0.75:0.01"},
            steps=_mc("test_summaries_custom_quantiles"),
        ),
        Config(
            name="namespacing-on",
            args=[
                f"--model-repository={repos}/addsub_repo",
                f"--model-repository={repos}/subadd_repo",
                "--model-namespacing=true",
                "--allow-metrics=true",
            ],
            setup=setup_namespacing,
            steps=_mc("test_model_namespacing_label_with_namespace_on"),
            unsupported=NOT_YET_NAMESPACING,
        ),
        Config(
            name="namespacing-off",
            args=[
                f"--model-repository={repos}/addsub_repo",
                "--model-namespacing=false",
                "--allow-metrics=true",
            ],
            setup=setup_namespacing,
            steps=_mc("test_model_namespacing_label_with_namespace_off"),
        ),
        Config(
            name="queue_size",
            args=[f"--model-repository={ctx.work}/queue_size_models", "--log-verbose=1"],
            setup=setup_queue,
            env={"MAX_BATCH_SIZE": str(MAX_BATCH_SIZE), "MAX_QUEUE_DELAY_US": str(MAX_QUEUE_DELAY_US)},
            steps=[Run("metrics_queue_size_test.py", timeout=900)],
        ),
    ]
    return out


SUITE = Suite(
    name="L0_metrics",
    configs=configs,
    left_out=[
        LeftOut("metrics_api_test (C++ unit test)", CPP_CLIENT),
        LeftOut(
            "GPU peer access memory, GPU count and energy-consumption interval checks (nvidia-smi, NVML)", GPU
        ),
    ],
    notes=[
        "The `identity` C++ backend of identity_delay, identity_cache_on/off is stood in for by a python model; "
        "libtorch_float32_float32_float32's KIND_GPU is KIND_CPU.",
    ],
)
