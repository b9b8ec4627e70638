# Sourced by the scripts that start servers and agents (steady-writes.sh, bench-scale.sh):
# each pid they start goes into `pids`, and `stop_all` ends them all by pid (SIGTERM, then
# SIGKILL to any still running after 20 s), so that no process a script started outlives it.
pids=()
stop_all() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for _ in $(seq 100); do
    alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.2
  done
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  pids=()
}
