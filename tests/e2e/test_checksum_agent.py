"""Triton's checksum repository agent (`model_repository_agents { agents [{ name: "checksum" ... }] }`): a model
whose files match their MD5 digests loads; one whose files do not, or whose agent settings are wrong, fails its
load with the file and the reason, and the others keep serving."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from e2e.models import copy_examples
from e2e.server_process import RunningServer, running_server


def _with_agent(repo: Path, name: str, parameters: dict[str, str], agent: str = "checksum") -> None:
    shutil.copytree(repo / "simple", repo / name)
    config = repo / name / "config.pbtxt"
    entries = " ".join(f'{{ key: "{k}" value: "{v}" }}' for k, v in parameters.items())
    config.write_text(
        config.read_text().replace('name: "simple"', f'name: "{name}"')
        + f'\nmodel_repository_agents {{ agents [ {{ name: "{agent}" parameters [ {entries} ] }} ] }}\n'
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, frontend_processes: int) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("repo")
    copy_examples(repo, "simple")
    digest = hashlib.md5((repo / "simple" / "1" / "model.onnx").read_bytes()).hexdigest()
    _with_agent(repo, "matches", {"md5:1/model.onnx": digest})  # the algorithm in any case, as Triton
    _with_agent(repo, "mismatch", {"MD5:1/model.onnx": "0" * 32})
    _with_agent(repo, "missing_file", {"MD5:1/weights.bin": digest})
    _with_agent(repo, "outside", {"MD5:../simple/1/model.onnx": digest})
    _with_agent(repo, "sha256", {"SHA256:1/model.onnx": digest})
    _with_agent(repo, "no_algorithm", {"1/model.onnx": digest})
    _with_agent(repo, "other_agent", {}, agent="relocation")
    # A python model whose auto_complete_config leaves a mark: with its file mismatched, it must never run.
    tampered = repo / "tampered_python"
    (tampered / "1").mkdir(parents=True)
    marker = repo.parent / f"{repo.name}-auto-complete-ran"
    (tampered / "1" / "model.py").write_text(
        "class TritonPythonModel:\n"
        "    @staticmethod\n"
        "    def auto_complete_config(config):\n"
        f"        open({str(marker)!r}, 'w').close()\n"
        "        return config\n"
    )
    (tampered / "config.pbtxt").write_text(
        'backend: "python"\nmodel_repository_agents { agents [ { name: "checksum" parameters [ '
        f'{{ key: "MD5:1/model.py" value: "{"0" * 32}" }} ] }} ] }}\n'
    )
    log = tmp_path_factory.mktemp("logs") / "server.log"
    with running_server([repo], log, "--exit-on-error=false", "--model-control-mode=explicit",
                        "--load-model=*", wait_ready=False) as running:  # fmt: skip
        yield running


EXPECTED_FAILURES = {
    "mismatch": f"Mismatched MD5 hash for file 1/model.onnx, expect: {'0' * 32}, got: ",
    "missing_file": "failed to open text file for read 1/weights.bin: No such file or directory",
    "outside": "checksum file ../simple/1/model.onnx is outside the model directory",
    "sha256": "Unsupported checksum algorithm: SHA256",
    "no_algorithm": "failed to parse key: 1/model.onnx",
    "other_agent": "repository agent 'relocation' is not available",
}


def test_a_refused_models_code_never_runs(
    server: RunningServer, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The agent checks the files before anything of the model runs: not even its auto_complete_config."""
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        row = next(r for r in client.get_model_repository_index() if r["name"] == "tampered_python")
    finally:
        client.close()
    assert "Mismatched MD5 hash for file 1/model.py" in row["reason"]
    assert not list(tmp_path_factory.getbasetemp().glob("*-auto-complete-ran"))


def test_matching_files_load_and_serve(server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        assert client.is_model_ready("matches")
        a = np.arange(16, dtype=np.int32).reshape(1, 16)
        inputs = [httpclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(a)
        np.testing.assert_array_equal(client.infer("matches", inputs).as_numpy("OUTPUT0"), a + a)
    finally:
        client.close()


def test_each_refused_model_fails_with_its_reason_and_the_others_serve(server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        index = {row["name"]: row for row in client.get_model_repository_index()}
        for name, reason in EXPECTED_FAILURES.items():
            assert index[name]["state"] == "UNAVAILABLE", index[name]
            assert reason in index[name]["reason"], index[name]
            with pytest.raises(InferenceServerException) as failed:
                client.load_model(name)  # asked again: the same answer, through the repository API
            assert reason in str(failed.value)
            assert failed.value.status() == "400"
        assert client.is_model_ready("simple") and client.is_model_ready("matches")
    finally:
        client.close()
