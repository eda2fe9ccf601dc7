#!/usr/bin/env bash
# Device call B (BENCHMARKS.md §7): Coser & Orvieto's 1-layer CIFAR row through sptune's own CLI on the GPU,
# search_spaces/cifar_1layer_gpu.yaml, sized by its dry run to 5 minutes. Runs on the machine call A left warm
# (within its 30 s), so the bundle call A installed in $SITE is still there; this call carries only the data:
#   run(command="bash tools/device/call_b.sh", carry=[".device/data"], timeout_s=420)
# The sweep runs under `timeout`; a trap copies what exists when it ends (also when killed) into $OUT, at most 8
# files: call_b.log, steps.json, gpu_util.csv, results.json, results.md, report.html, study_state.json, and
# study.tar.gz (the study folder without checkpoints: per-trial epoch times, MLflow's database).
# --toy: the CPU rehearsal's run (tests/e2e/test_device_rehearsal.py): the same spec on scikit-learn's digits at a
# toy size, on the CPU, with no data carried, packed as the spec asks, without the LR extension's round: it trains
# the same trainable in more packs of the lone-member kind the pretraining's already runs, and reaches no import
# the searches do not (each round would add a stage, ~10 s, to the rehearsal).
set -u -o pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
cd "$REPO" || exit 2
OUT=${OUT:-$REPO/.device/out_b}
SITE=${SITE:-/tmp/site}                   # where call A installed the bundle
WORK=${WORK:-/tmp/call_b}                 # the unpacked data and the study folder
SWEEP_LIMIT_S=${SWEEP_LIMIT_S:-330}       # the sweep's own limit: 5 minutes planned, 30 s of slack
SPEC=search_spaces/cifar_1layer_gpu.yaml
TOY=0
[ "${1:-}" = "--toy" ] && TOY=1
mkdir -p "$OUT" "$WORK"
export PYTHONPATH="$SITE:$REPO${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
STUDY="$WORK/study"
STEPS="$WORK/steps.jsonl"
: >"$STEPS"
exec > >(tee -a "$OUT/call_b.log") 2>&1

# shellcheck source=steps.sh
source "$REPO/tools/device/steps.sh"

collect() {  # whatever the sweep left, however it ended
  local rc=$?
  trap - EXIT TERM INT
  stamp "collect (exit $rc)"
  [ -n "$TRACE_PID" ] && kill "$TRACE_PID" 2>/dev/null
  for f in results.json results.md report.html study_state.json; do
    [ -f "$STUDY/$f" ] && cp "$STUDY/$f" "$OUT/"
  done
  [ -d "$STUDY" ] && tar -czf "$OUT/study.tar.gz" -C "$WORK" --exclude='checkpoint_*' --exclude='*.pt' \
    --exclude='spt_cache' study 2>/dev/null
  finish_call "$rc"
}
trap collect EXIT
trap 'exit 143' TERM INT

stamp "call B start (toy=$TOY)"
ARGS=(--output "$STUDY")
if [ "$TOY" = 1 ]; then
  ARGS+=(--set "task={name: digits}" --set training.device=cpu --set training.precision=auto
         --set resources.gpu=0 --set resources.cpu=1 --set pretrain.epochs=2 --set finetune.epochs=2
         --set scheduler.grace_period=1 --set rerun_seeds=2 --set training.warmup_steps=10 --set pretrain.warmup_steps=10
         --set lr_extend.max_rounds=0)
  for v in scratch spt qk_init; do
    ARGS+=(--set "variants.$v.search.lr={type: grid, values: [1.0e-3, 3.0e-3], extend: true}")
  done
else
  stamp "unpack data"
  "$PY" tools/device/pack_data.py unpack --pack .device/data --out "$WORK/data" || exit 3
  ARGS+=(--data-dir "$WORK/data")
fi
stamp "imports"
"$PY" tools/device/check_env.py --imports || exit 4
stamp "dry run"
"$PY" -m sptune.sweep "$SPEC" "${ARGS[@]}" --dry-run >"$WORK/dry_run.txt" || { cat "$WORK/dry_run.txt"; exit 5; }
sed -n "/^Cost:/,\$p" "$WORK/dry_run.txt"
stamp "sweep (limit ${SWEEP_LIMIT_S} s)"
# SIGINT to the driver alone (--foreground): it stops the study as Ctrl-C does, saves its state and shuts its Ray
# down; signalling the whole group would kill Ray's processes under it first. KILL 20 s later if it has not ended.
timeout --foreground --signal=INT --kill-after=20 "$SWEEP_LIMIT_S" "$PY" -m sptune.sweep "$SPEC" "${ARGS[@]}"
rc=$?
stamp "sweep done (exit $rc)"
exit "$rc"
