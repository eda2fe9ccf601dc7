#!/usr/bin/env bash
# Device call A (BENCHMARKS.md §7): the machine as found, the bundle installed where call B finds it, the CUDA
# tests, and benchmarks/gpu_epoch.py's arms (gpu_epoch_arms.txt). Carries the bundle (tools/device/bundle.py):
#   run(command="bash tools/device/call_a.sh", carry=[".device/bundle"], timeout_s=420)
# Files stay on a warm machine between calls (only processes end), so the install into $SITE (/tmp/site, outside
# the checkout) serves call B, which must start within the machine's 30 s warm window.
# Each step runs under `timeout` and prints its start; the arms run, most needed first, while CALL_A_BUDGET_S
# (default 300) still holds an arm's limit. At most 8 files come back in $OUT: call_a.log, steps.json,
# gpu_util.csv, env_report.json, install.txt, test_cuda.log, gpu_epoch.json, gpu_epoch.log.
set -u -o pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
cd "$REPO" || exit 2
OUT=${OUT:-$REPO/.device/out_a}
SITE=${SITE:-/tmp/site}
WORK=${WORK:-/tmp/call_a}
BUDGET_S=${CALL_A_BUDGET_S:-300}
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
stamp "environment report"
timeout -k 5 90 "$PY" tools/device/env_report.py --json "$OUT/env_report.json"

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

if [ -f tests/training/test_cuda.py ]; then
  stamp "CUDA tests"
  # The CUDA tests, and the packs' GPU tests (masks and dropout on the device, the captured pack step).
  PACK_GPU=tests/training/packing/test_pack.py::test_on_a_gpu
  timeout -k 5 150 "$PY" -m pytest -q -p no:cacheprovider tests/training/test_cuda.py \
    "${PACK_GPU}_members_draw_masks_and_dropout_on_the_device_as_alone" \
    "${PACK_GPU}_a_captured_pack_trains_as_the_eager_one_and_captures_again_when_a_member_leaves" \
    >"$OUT/test_cuda.log" 2>&1
  echo "CUDA tests exit $?" | tee -a "$OUT/test_cuda.log"
  tail -n 5 "$OUT/test_cuda.log"
else
  echo "tests/training/test_cuda.py is not in this checkout: no CUDA tests" | tee "$OUT/test_cuda.log"
fi

stamp "gpu_epoch arms"
KNOWN=$("$PY" benchmarks/gpu_epoch.py --help 2>/dev/null | grep -o -- '--[a-z][a-z-]*' | sort -u)
while read -r name limit args; do
  case "$name" in ''|'#'*) continue ;; esac
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
