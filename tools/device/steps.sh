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
