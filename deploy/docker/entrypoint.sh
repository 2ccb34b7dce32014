#!/bin/sh
# The images' ENTRYPOINT (installed as /opt/modelhost/bin/modelhost-entrypoint). What it runs:
#   (no arguments)      modelhost serve: the bundled examples, ports 8000 (HTTP), 8001 (gRPC), 8002 (metrics)
#   serve [ARGS...]     modelhost sagemaker ARGS: SageMaker starts its containers as `docker run IMAGE serve`
#   -... / --...        modelhost serve with these flags (`docker run IMAGE --model-repository=/models`)
#   anything else       run as given (`docker run IMAGE modelhost perf ...`, `docker run -it IMAGE bash`)
# exec throughout: the server is the container's PID 1 and gets `docker stop`'s SIGTERM itself.
set -eu
if [ $# -eq 0 ]; then
  exec modelhost serve
fi
case "$1" in
serve)
  shift
  exec modelhost sagemaker "$@"
  ;;
-*) exec modelhost serve "$@" ;;
*) exec "$@" ;;
esac
