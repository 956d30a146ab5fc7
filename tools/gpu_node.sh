#!/usr/bin/env bash
# The GPU node's one command (issue 29 item 2): tools/gpu_node.sh OUTDIR [ARGS...], run from anywhere in a copy of
# this repository that holds the offline kit (build/gpu-kit/, made by `nox -s gpu_kit` where there is network).
#   1. installs the kit's wheels with no index into build/gpu-kit/site (the node's own packages stay as they are);
#   2. compares what is installed with the kit's target file and runs its checks (git, a C compiler, Python.h, ...):
#      a difference is a line in the log, and the run goes on (tools/gpu_node_check.py; OUTDIR/node.json);
#   3. runs benchmarks/gpu_bench.py with ARGS (e.g. --dry-run, --only fp8, --budget-s 300) into OUTDIR, each fit's
#      result written as it finishes (OUTDIR/gpu-journal.jsonl), the whole run killed at 7.5 minutes by default.
# Everything this prints is also in OUTDIR/node.log. Nothing here calls git, nox or a package index: the commit is
# the kit's (kit.json). Environment: PYTHON (default python3), GPU_KIT (default build/gpu-kit), NODE_TIMEOUT_S.
set -uo pipefail
if [ $# -lt 1 ]; then
    echo "usage: tools/gpu_node.sh OUTDIR [gpu_bench ARGS...]" >&2
    exit 2
fi
out=$(mkdir -p "$1" && cd "$1" && pwd) || { echo "gpu_node: cannot create the output folder $1" >&2; exit 2; }
shift
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
kit=${GPU_KIT:-$root/build/gpu-kit}
python=${PYTHON:-python3}
exec > >(tee -a "$out/node.log") 2>&1
cd "$root" || exit 2
if [ ! -f "$kit/kit.json" ] || [ ! -f "$kit/manifest.json" ]; then
    echo "gpu_node: no kit at $kit (kit.json and manifest.json are missing); build it where there is network:" \
        "nox -s gpu_kit, then bring build/gpu-kit/ here"
    exit 2
fi
shopt -s nullglob
wheels=("$kit"/*.whl)
echo "gpu_node: installing ${#wheels[@]} wheel(s) from $kit, no index"
if [ ${#wheels[@]} -gt 0 ] && ! "$python" -m pip install -q --no-index --no-deps --no-compile --disable-pip-version-check \
    --target "$kit/site" --upgrade "${wheels[@]}"; then
    echo "gpu_node: installing the kit failed (pip's message above); nothing was run"
    exit 3
fi
export PYTHONPATH="$kit/site${PYTHONPATH:+:$PYTHONPATH}"
PRECISION_PLUGINS_COMMIT=$("$python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["commit"])' "$kit/kit.json")
export PRECISION_PLUGINS_COMMIT
"$python" -m tools.gpu_node_check "$kit" "$out" || echo "gpu_node: the checks themselves failed (above); going on"
echo "gpu_node: benchmarks/gpu_bench.py --out $out $*"
timeout --kill-after=10 "${NODE_TIMEOUT_S:-450}" "$python" benchmarks/gpu_bench.py --out "$out" "$@"
status=$?
[ $status -eq 124 ] && echo "gpu_node: the run passed ${NODE_TIMEOUT_S:-450} s and was stopped; every fit it" \
    "finished is in $out/gpu-journal.jsonl"
echo "gpu_node: finished with exit status $status"
exit $status
