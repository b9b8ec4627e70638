# Sourced by the scripts that start servers and agents (steady-writes.sh, bench-scale.sh):
# each pid they start goes into `pids`, and `stop_all` ends them all by pid (SIGTERM, then
# SIGKILL to any still running after 20 s), so that no process a script started outlives it.
# `start_etcd` starts the stock etcd they measure against.
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

# Starts a single-member etcd with Debian's defaults (no limit raised) on loopback: data in $1,
# clients on port $2 (peers on $2 + 10), its log in $3; sets `etcd_pid` and waits (up to 10 s)
# until it answers /health.
start_etcd() {
  etcd --data-dir "$1" --listen-client-urls "http://127.0.0.1:$2" \
    --advertise-client-urls "http://127.0.0.1:$2" \
    --listen-peer-urls "http://127.0.0.1:$(($2 + 10))" >"$3" 2>&1 &
  etcd_pid=$!
  pids+=("$etcd_pid")
  for _ in $(seq 50); do curl -sf "http://127.0.0.1:$2/health" >/dev/null && break; sleep 0.2; done
}
