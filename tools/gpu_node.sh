#!/usr/bin/env bash
# The GPU node's one command (issue 29 item 2): tools/gpu_node.sh OUTDIR [ARGS...], run from anywhere in a copy of
# this repository that holds the offline kit (build/gpu-kit/, made by `nox -s gpu_kit` where there is network).
#   1. installs the kit's wheels with no index into build/gpu-kit/site (the node's own packages stay as they are);
#   2. compares what is installed with the kit's target file and runs its checks (git, a C compiler, Python.h, ...):
#      a difference is a line in the log, and the run goes on (tools/gpu_node_check.py; OUTDIR/node.json);
#   3. runs the project's tests marked `gpu` (those that skip without CUDA) with pytest, at most NODE_TESTS_S
#      (default 120) seconds, into OUTDIR/gpu-tests.xml (JUnit: every test, its outcome and time);
#   4. runs benchmarks/gpu_bench.py --budget-s 200 ARGS (e.g. --dry-run, --only fp8, --budget-s 300: ARGS come
#      last and win) into OUTDIR, each fit's result written as it finishes (OUTDIR/gpu-journal.jsonl), killed at
#      NODE_BENCH_S (default 270) seconds: about 7 minutes in all. `--only fits,fp8` leaves the tests out,
#      `--only tests` runs only them; `--dry-run` prints the test command instead of running it.
# Everything this prints is also in OUTDIR/node.log; OUTDIR ends with at most 7 files. Nothing here calls git, nox
# or a package index: the commit is the kit's (kit.json). Environment: PYTHON (default python3), GPU_KIT (default
# build/gpu-kit), NODE_TESTS_S, NODE_BENCH_S.
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
tests=yes bench=yes dry=no bench_args=()
while [ $# -gt 0 ]; do  # --only: "tests" is this script's part, the other sections gpu_bench's
    case "$1" in
        --only)
            only=",${2:-},"
            [[ $only == *,tests,* ]] || tests=no
            rest=$(echo "$only" | sed 's/,tests,/,/g; s/^,//; s/,$//')
            if [ -n "$rest" ]; then bench_args+=(--only "$rest"); else bench=no; fi
            shift 2 ;;
        --dry-run) dry=yes; bench_args+=("$1"); shift ;;
        *) bench_args+=("$1"); shift ;;
    esac
done
status=0
test_cmd=("$python" -m pytest -m gpu -q -p no:cacheprovider --junitxml="$out/gpu-tests.xml"
          packages/precision-fsdp/tests tests-integration/test_fsdp_gpu.py tests-integration/test_tune_precision.py)
if [ $tests = yes ] && [ $dry = yes ]; then
    echo "gpu_node: tests (not run: --dry-run): ${test_cmd[*]}"
elif [ $tests = yes ]; then
    echo "gpu_node: tests marked gpu, at most ${NODE_TESTS_S:-120} s: ${test_cmd[*]}"
    timeout --kill-after=10 "${NODE_TESTS_S:-120}" "${test_cmd[@]}"
    code=$?
    [ $code -eq 124 ] && echo "gpu_node: the tests passed ${NODE_TESTS_S:-120} s and were stopped"
    echo "gpu_node: tests finished with exit status $code"
    [ $code -ne 0 ] && status=$code
fi
if [ $bench = yes ]; then
    echo "gpu_node: benchmarks/gpu_bench.py --out $out --no-index --budget-s 200 ${bench_args[*]-}"
    timeout --kill-after=10 "${NODE_BENCH_S:-270}" "$python" benchmarks/gpu_bench.py --out "$out" --no-index \
        --budget-s 200 ${bench_args[@]+"${bench_args[@]}"}
    code=$?
    [ $code -eq 124 ] && echo "gpu_node: the GPU run passed ${NODE_BENCH_S:-270} s and was stopped; every fit it" \
        "finished is in $out/gpu-journal.jsonl"
    echo "gpu_node: gpu_bench finished with exit status $code"
    [ $code -ne 0 ] && status=$code
fi
echo "gpu_node: finished with exit status $status"
exit $status
