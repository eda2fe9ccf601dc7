# Sourced by call_a.sh and call_b.sh (after OUT and STEPS are set): step timestamps, printed and kept in $STEPS
# for steps.json, and the GPU-utilisation trace in $OUT/gpu_util.csv (TRACE_PID: its sampler, to stop).
T0=$SECONDS

stamp() {  # one step's start or end
  local now; now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  echo "[$now +$((SECONDS - T0))s] $*"
  printf '{"t": "%s", "step": "%s"}\n' "$now" "$*" >>"$STEPS"
}

TRACE_PID=""
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -lms 500 >"$OUT/gpu_util.csv" 2>&1 &
  TRACE_PID=$!
fi

finish_call() {  # the end of a call's collect trap: steps.json, the files listing, the log flushed, exit $1
  "$PY" -c 'import json,sys; print(json.dumps([json.loads(l) for l in open(sys.argv[1])], indent=1))' \
    "$STEPS" >"$OUT/steps.json" 2>/dev/null
  ls -la "$OUT"
  exec >&- 2>&-  # tee (the log) sees the end of its input and writes the rest before the call returns
  sleep 1
  exit "$1"
}
