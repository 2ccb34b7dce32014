#!/bin/sh
# The container images' install steps, in one place: deploy/docker/Dockerfile and Dockerfile.gpu RUN this
# script, and deploy/docker/replay.py runs its `venv` step, read from the Dockerfile's RUN line, in a fresh
# virtual environment on a machine with no container daemon, so the replay cannot drift from the images.
#
#   install.sh python VARIANT                          system Python for the venv (gpu: Ubuntu's python3)
#   install.sh user                                    the non-root user modelhost, UID/GID 1000
#   install.sh venv VARIANT EXTRAS SOURCE PREFIX       a venv at PREFIX with modelhost[EXTRAS] from SOURCE
#
# VARIANT is cpu or gpu; EXTRAS a comma-separated list of pyproject extras (may be empty).
# Environment (the Dockerfiles' build args arrive as environment variables):
#   TORCH_INDEX_URL      cpu only: an extra index holding the CPU build of torch (PyPI's torch is the CUDA
#                        build, multi-GB); empty: pip's own configuration alone decides where torch comes from
#   TENSORRT_VERSION     gpu only: the TensorRT release to install with the tensorrt extra (empty: the newest)
#   INSTALL_DRY_RUN=FILE venv step only: resolve with `pip install --dry-run --report FILE` and install nothing
#                        (the replay's check of the GPU branch)
set -eu

die() {
  echo "install.sh: $*" >&2
  exit 2
}

has_extra() { # has_extra NAME EXTRAS
  case ",$2," in *",$1,"*) return 0 ;; *) return 1 ;; esac
}

step_python() {
  case "$1" in
  cpu) ;; # python:3.11-slim has it
  gpu)
    # Ubuntu 24.04's python3 is 3.12; python3-venv for the build stage's `python3 -m venv`.
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    apt-get install -y --no-install-recommends python3 python3-venv ca-certificates
    rm -rf /var/lib/apt/lists/*
    ;;
  *) die "unknown variant '$1' (cpu or gpu)" ;;
  esac
}

step_user() {
  # Ubuntu 24.04 images ship a user `ubuntu` with UID 1000: give the UID to modelhost in both images.
  if id ubuntu >/dev/null 2>&1; then userdel --remove ubuntu 2>/dev/null || userdel ubuntu; fi
  groupadd --gid 1000 modelhost
  useradd --uid 1000 --gid 1000 --create-home --home-dir /home/modelhost --shell /usr/sbin/nologin modelhost
}

step_venv() {
  variant=$1 extras=$2 source=$3 prefix=$4
  case "$variant" in cpu | gpu) ;; *) die "unknown variant '$variant' (cpu or gpu)" ;; esac
  [ -f "$source/pyproject.toml" ] || die "no pyproject.toml in $source"
  python3 -m venv "$prefix"
  python="$prefix/bin/python"
  export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_WARN_SCRIPT_LOCATION=1 PIP_ROOT_USER_ACTION=ignore \
    PIP_PROGRESS_BAR=off
  set -- "$source${extras:+[$extras]}"
  if [ "$variant" = gpu ]; then
    # ONNX Runtime's CUDA build. modelhost depends on `onnxruntime`, which installs the same Python package:
    # the CPU one is swapped out below.
    set -- "$@" onnxruntime-gpu
    # A plan loads only on the TensorRT that built it: the image pins one (the KServe runtime declares its
    # major), where the extra alone would float to the newest.
    if has_extra tensorrt "$extras" && [ -n "${TENSORRT_VERSION:-}" ]; then
      set -- "$@" "tensorrt==$TENSORRT_VERSION"
    fi
  elif has_extra torch "$extras" && [ -n "${TORCH_INDEX_URL:-}" ]; then
    # 2.13.0+cpu from this index ranks above PyPI's 2.13.0 (a local version label sorts higher).
    set -- "$@" --extra-index-url "$TORCH_INDEX_URL"
  fi
  if [ -n "${INSTALL_DRY_RUN:-}" ]; then
    "$python" -m pip install --dry-run --ignore-installed --quiet --report "$INSTALL_DRY_RUN" "$@"
    echo "install.sh: dry run: resolved into $INSTALL_DRY_RUN; nothing installed" >&2
    return 0
  fi
  "$python" -m pip install "$@"
  if [ "$variant" = gpu ]; then
    # Uninstalling onnxruntime deletes the files it shares with onnxruntime-gpu: lay those down again.
    ort=$("$python" -c 'import importlib.metadata as m; print(m.version("onnxruntime-gpu"))')
    "$python" -m pip uninstall -y onnxruntime
    "$python" -m pip install --no-deps --force-reinstall "onnxruntime-gpu==$ort"
    "$python" -c 'import onnxruntime as o; assert "CUDAExecutionProvider" in o.get_available_providers()'
  else
    "$python" -m pip check
    # A CUDA build of torch pulls nvidia-* wheels (gigabytes): the slim image must not have them.
    cuda=$("$python" -c 'import importlib.metadata as m
print(" ".join(sorted({d.metadata["Name"] for d in m.distributions() if d.metadata["Name"].startswith("nvidia-")})))')
    [ -z "$cuda" ] || die "the CPU image got CUDA packages ($cuda): set TORCH_INDEX_URL to a CPU torch index"
  fi
  "$python" -c 'import modelhost.cli.main'
  # The entry and health scripts the Dockerfiles name, beside the modelhost command.
  install -m 0755 "$source/deploy/docker/entrypoint.sh" "$prefix/bin/modelhost-entrypoint"
  install -m 0644 "$source/deploy/docker/healthcheck.py" "$prefix/bin/modelhost-healthcheck.py"
}

[ $# -ge 1 ] || die "usage: install.sh python VARIANT | user | venv VARIANT EXTRAS SOURCE PREFIX"
step=$1
shift
case "$step" in
python)
  [ $# -eq 1 ] || die "usage: install.sh python VARIANT"
  step_python "$1"
  ;;
user)
  [ $# -eq 0 ] || die "usage: install.sh user"
  step_user
  ;;
venv)
  [ $# -eq 4 ] || die "usage: install.sh venv VARIANT EXTRAS SOURCE PREFIX"
  step_venv "$@"
  ;;
*) die "unknown step '$step' (python, user or venv)" ;;
esac
