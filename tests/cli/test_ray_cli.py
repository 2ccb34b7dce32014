"""`modelhost ray`: its usage errors, and `modelhost ray config` printing the Serve config of a repository."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

import modelhost
from modelhost.cli.main import main

EXAMPLES = Path(modelhost.__file__).parent / "examples"


def test_a_bad_deployment_file_is_a_usage_error_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copytree(EXAMPLES / "simple", tmp_path / "repo" / "simple")
    bad = tmp_path / "deployments.yaml"
    bad.write_text("deployments:\n  g:\n    models: [simple]\n    num_replicas: 0\n")
    for command in ("serve", "config"):
        assert main(["ray", command, f"--model-repository={tmp_path / 'repo'}", f"--deployments={bad}"]) == 2
        assert "deployment 'g': 'num_replicas' must be a positive integer" in capsys.readouterr().err
    assert main(["ray", "serve"]) == 2
    assert "--model-repository" in capsys.readouterr().err


def test_config_prints_one_application_per_deployment_with_measured_memory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copytree(EXAMPLES / "simple", tmp_path / "repo" / "simple")
    assert main(["ray", "config", f"--model-repository={tmp_path / 'repo'}"]) == 0
    config = yaml.safe_load(capsys.readouterr().out)
    (application,) = config["applications"]
    assert application["name"] == "simple" and application["import_path"] == "modelhost.cluster.apps:build"
    assert application["args"]["models"] == ["simple"]
    (deployment,) = application["deployments"]
    assert deployment["ray_actor_options"]["memory"] >= 64 << 20  # measured: the model's load, and the floor


def test_the_ingress_ports_flags_are_checked_as_modelhost_serves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copytree(EXAMPLES / "simple", tmp_path / "repo" / "simple")
    serve = ["ray", "serve", f"--model-repository={tmp_path / 'repo'}", "--allow-metrics=false"]
    assert main([*serve, "--http-use-ssl=true"]) == 2
    assert "--http-use-ssl needs --http-server-cert and --http-server-key" in capsys.readouterr().err
    assert main([*serve, "--grpc-restricted-protocol=nope:a=b"]) == 2
    assert "unknown restricted protocol 'nope'" in capsys.readouterr().err
    missing = [f"--grpc-server-cert={tmp_path / 'none.pem'}", f"--grpc-server-key={tmp_path / 'none.key'}"]
    # A certificate that cannot be read stops the ingress before it joins (or starts) a Ray cluster.
    assert main([*serve, "--grpc-use-ssl=true", *missing]) == 1
    assert "cannot use --grpc-server-cert=" in capsys.readouterr().err
