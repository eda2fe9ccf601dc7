#!/usr/bin/env bash
# Device call A (BENCHMARKS.md §7): the bundle installed where call B finds it, then, as its first GPU work, a
# 2-member pack's forward and backward against two solo trials, then gpu_epoch_arms.txt's steps in order (the
# captured pack of 8 first; the machine's report and the CUDA tests are steps there too). Carries the bundle
# (tools/device/bundle.py):
#   run(command="bash tools/device/call_a.sh", carry=[".device/bundle"], timeout_s=240)
# Files stay on a warm machine between calls (only processes end), so the install into $SITE (/tmp/site, outside
# the checkout) serves call B, which must start within the machine's 30 s warm window.
# Each step runs under `timeout` and prints its start; the arms run, most needed first, while CALL_A_BUDGET_S
# (default 225: the call's 240 s less the collection) still holds an arm's limit. At most 8 files come back in
# $OUT: call_a.log, steps.json, gpu_util.csv, env_report.json, install.txt, test_cuda.log (the pack check's and the
# CUDA tests' output), gpu_epoch.json, gpu_epoch.log.
set -u -o pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
cd "$REPO" || exit 2
OUT=${OUT:-$REPO/.device/out_a}
SITE=${SITE:-/tmp/site}
WORK=${WORK:-/tmp/call_a}
BUDGET_S=${CALL_A_BUDGET_S:-225}
BUNDLE=${BUNDLE:-.device/bundle}
ARMS=${ARMS:-tools/device/gpu_epoch_arms.txt}
PY=${PYTHON:-python3}
mkdir -p "$OUT" "$WORK"
STEPS="$WORK/steps.jsonl"
: >"$STEPS"
exec > >(tee -a "$OUT/call_a.log") 2>&1
# shellcheck source=steps.sh
source "$REPO/tools/device/steps.sh"

collect() {
  local rc=$?
  trap - EXIT TERM INT
  stamp "collect (exit $rc)"
  [ -n "$TRACE_PID" ] && kill "$TRACE_PID" 2>/dev/null
  "$PY" - "$WORK" "$OUT/gpu_epoch.json" <<'EOF' 2>/dev/null
import json, sys
from pathlib import Path
arms = {p.stem.removeprefix("gpu_epoch_"): json.loads(p.read_text()) for p in sorted(Path(sys.argv[1]).glob("gpu_epoch_*.json"))}
Path(sys.argv[2]).write_text(json.dumps(arms, indent=1) + "\n") if arms else None
EOF
  finish_call "$rc"
}
trap collect EXIT
trap 'exit 143' TERM INT

stamp "call A start (budget ${BUDGET_S} s)"
stamp "install the bundle into $SITE"
{
  timeout -k 5 120 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" "$BUNDLE"/*.whl && echo "installed $(ls "$BUNDLE"/*.whl | wc -l) wheels into $SITE"
} >"$OUT/install.txt" 2>&1 || { cat "$OUT/install.txt"; exit 3; }
export PYTHONPATH="$SITE:$REPO${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
stamp "environment checks"
timeout -k 5 90 "$PY" tools/device/check_env.py --imports --requirements "$BUNDLE/bundle.json" >>"$OUT/install.txt" 2>&1
echo "environment checks exit $?" >>"$OUT/install.txt"
tail -n 20 "$OUT/install.txt"

stamp "pack check: 2 members against 2 solo trials, forward and backward"
timeout -k 5 60 "$PY" -m pytest -q -p no:cacheprovider tests/training/packing/test_pack.py \
  -k two_member_pack_s_forward_and_backward >"$OUT/test_cuda.log" 2>&1
echo "pack check exit $?" | tee -a "$OUT/test_cuda.log"
tail -n 3 "$OUT/test_cuda.log"

env_report() {
  timeout -k 5 "$1" "$PY" tools/device/env_report.py --json "$OUT/env_report.json"
}

cuda_tests() {  # the CUDA tests, and the packs' GPU tests (masks and dropout on the device, the captured step)
  local pack_gpu=tests/training/packing/test_pack.py::test_on_a_gpu
  timeout -k 5 "$1" "$PY" -m pytest -q -p no:cacheprovider tests/training/test_cuda.py \
    "${pack_gpu}_members_draw_masks_and_dropout_on_the_device_as_alone" \
    "${pack_gpu}_a_captured_pack_trains_as_the_eager_one_and_captures_again_when_a_member_leaves" \
    >>"$OUT/test_cuda.log" 2>&1
  echo "CUDA tests exit $?" | tee -a "$OUT/test_cuda.log"
  tail -n 5 "$OUT/test_cuda.log"
}

stamp "gpu_epoch arms"
KNOWN=$("$PY" benchmarks/gpu_epoch.py --help 2>/dev/null | grep -o -- '--[a-z][a-z-]*' | sort -u)
while read -r name limit args; do
  case "$name" in ''|'#'*) continue ;; esac
  case "$name" in
    @*)  # a step of this script, not an arm: @env_report, @cuda_tests
      left=$((BUDGET_S - (SECONDS - T0)))
      if [ "$left" -lt "$limit" ]; then
        echo "step $name skipped: ${left} s of the budget left, it needs up to ${limit} s" | tee -a "$OUT/gpu_epoch.log"
      else
        stamp "${name#@} (limit ${limit} s)"
        "${name#@}" "$limit"
      fi
      continue ;;
  esac
  unknown=$(for flag in $args; do case "$flag" in --*) echo "$KNOWN" | grep -qx -- "$flag" || echo "$flag" ;; esac; done)
  if [ -n "$unknown" ]; then
    echo "arm $name skipped: gpu_epoch.py does not know $(echo $unknown)" | tee -a "$OUT/gpu_epoch.log"
    continue
  fi
  left=$((BUDGET_S - (SECONDS - T0)))
  if [ "$left" -lt "$limit" ]; then
    echo "arm $name skipped: ${left} s of the budget left, it needs up to ${limit} s" | tee -a "$OUT/gpu_epoch.log"
    continue
  fi
  stamp "arm $name (limit ${limit} s)"
  # shellcheck disable=SC2086  # the arm's arguments are words by design
  timeout -k 5 "$limit" "$PY" benchmarks/gpu_epoch.py $args --json "$WORK/gpu_epoch_$name.json" </dev/null \
    >>"$OUT/gpu_epoch.log" 2>&1
  echo "arm $name exit $?" | tee -a "$OUT/gpu_epoch.log"
done <"$ARMS"
stamp "call A done"
