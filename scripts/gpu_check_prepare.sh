#!/usr/bin/env bash
# Prepares here, with network access, what scripts/gpu_check.sh needs on a GPU machine that has none
# (Python 3.12 with torch, cupy, cuda-bindings, nvidia-ml-py, onnxruntime, numpy, grpcio and protobuf installed):
#
#   .gpu_check/wheels/   the packages modelhost and its GPU tests need that such a machine lacks, as cp312
#                        manylinux x86-64 wheels, at the versions this project's .venv runs with
#   .gpu_check/pins/     grpcio and protobuf at this .venv's versions, used there only where the machine's own
#                        fail the import check (they are installed there, and other packages depend on them)
#   .gpu_check/bin/, lib/  wrk and h2load, unpacked from Debian's packages, with the libraries they need beyond
#                        glibc (used there only where the machine has no wrk / h2load of its own)
#
# .gpu_check is ignored by git; the device tool carries it (`carry: [".gpu_check"]`). Prints every file and the
# total size (the working tree and what it carries travel within 64 MiB). `--dry-run` prints the packages and
# their versions, and downloads nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

dry_run=0
[[ "${1:-}" == "--dry-run" ]] && dry_run=1

# Imported by `modelhost serve` (its web console: psutil, markdown-it-py) and the gpu tests' clients
# (tritonclient HTTP and gRPC), and not on that machine.
CARRY=(tritonclient grpcio-health-checking hpack orjson msgspec httptools python-rapidjson
       geventhttpclient gevent greenlet zope.event zope.interface brotli psutil markdown-it-py mdurl)
PINS=(grpcio protobuf)
DEBS=(wrk nghttp2-client)

if [[ ! -x .venv/bin/python ]]; then
  bash scripts/setup.sh dev >&2
fi
versions() {  # name==version of each package in this .venv
  .venv/bin/python - "$@" <<'EOF'
import sys
from importlib.metadata import PackageNotFoundError, version

for name in sys.argv[1:]:
    try:
        print(f"{name}=={version(name)}")
    except PackageNotFoundError:
        sys.exit(f"gpu_check_prepare: {name} is not installed in .venv (run scripts/setup.sh dev)")
EOF
}
mapfile -t carry < <(versions "${CARRY[@]}")
mapfile -t pins < <(versions "${PINS[@]}")

if (( dry_run )); then
  echo "wheels (cp312, manylinux x86-64) into .gpu_check/wheels: ${carry[*]}"
  echo "pins into .gpu_check/pins: ${pins[*]}"
  echo "Debian packages unpacked into .gpu_check/bin and lib: ${DEBS[*]}"
  exit 0
fi

out=.gpu_check
rm -rf "$out"
mkdir -p "$out/wheels" "$out/pins" "$out/bin" "$out/lib"
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
         manylinux2014_x86_64 manylinux1_x86_64; do
  platforms+=(--platform "$p")
done
download() {  # download DIR SPEC... (the warnings about this machine's own PIP_FIND_LINKS are left out)
  local dir=$1
  shift
  .venv/bin/python -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp "${platforms[@]}" -d "$dir" "$@" \
    2> >(grep -v "^WARNING: Location .* is ignored" >&2)
}
download "$out/wheels" "${carry[@]}"
download "$out/pins" "${pins[@]}"

# wrk and h2load from Debian's packages, with each shared library they load that is not glibc's (found among
# the packages' own libraries, else on this system).
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
LIB_DEBS=(libluajit2-5.1-2 libev4 libjansson4 libjemalloc2 libnghttp2-14 libxml2 libc-ares2 libssl3)
fetch_debs() { (cd "$work" && apt-get download "${DEBS[@]}" "${LIB_DEBS[@]}" >/dev/null 2>&1); }
if command -v apt-get >/dev/null && { fetch_debs || { [[ $(id -u) == 0 ]] && apt-get update -qq && fetch_debs; }; }
then
  for deb in "$work"/*.deb; do dpkg -x "$deb" "$work/root"; done
  cp "$work/root/usr/bin/wrk" "$work/root/usr/bin/h2load" "$out/bin/"
  libdirs="$work/root/usr/lib/x86_64-linux-gnu:$work/root/lib/x86_64-linux-gnu"
  for tool in "$out/bin/wrk" "$out/bin/h2load"; do
    linked=$(LD_LIBRARY_PATH=$libdirs ldd "$tool")
    if grep -q "not found" <<<"$linked"; then
      echo "gpu_check_prepare: $(basename "$tool") needs libraries not found here:" >&2
      grep "not found" <<<"$linked" >&2
      exit 1
    fi
    awk '/=> \// {print $3}' <<<"$linked" | while read -r lib; do
      case $(basename "$lib") in
        libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libgcc_s.so*|libstdc++.so*) ;;
        *) cp -L "$lib" "$out/lib/" ;;
      esac
    done
  done
else
  echo "gpu_check_prepare: Debian's wrk and nghttp2-client could not be downloaded: they are not carried" >&2
fi

echo "prepared $out:"
(cd "$out" && find . -type f -printf '%s %p\n' | sort -k2 | awk '{printf "  %8.1f KiB  %s\n", $1/1024, $2}')
total=$(du -sb "$out" | cut -f1)
echo "total: $(( total / 1024 / 1024 )) MiB ($total bytes)"
if (( total > 48 * 1024 * 1024 )); then
  echo "gpu_check_prepare: more than 48 MiB: with the working tree it may not fit the 64 MiB a device call carries" >&2
  exit 1
fi
