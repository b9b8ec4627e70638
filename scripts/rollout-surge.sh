#!/usr/bin/env bash
# rollout-surge.sh: at which report delay G does a rolling update's 25 % surge turn into a
# larger one? A sweep over G of scenarios/rolling-update.toml (8 copies, U = 15 s, B = 5 s,
# max_surge 25 % = 2, max_unavailable 0, the update at 300 s), for every controller, once with
# the runtime's rule (the rollout counts its own pending work) and once with a rollout that
# counts only the ledger (`counts_pending = false`, a lab-only switch). Prints a Markdown table:
# the most running copies above desired while the rollout ran (`surge + rollout_overshoot`),
# and the seconds the rollout took (`rollout_done − 300`).
#
# usage: scripts/rollout-surge.sh [G ...]      (default G = 0 5 10 11 15 20 30 45 60; seconds)
# environment: PROFILE (release; `debug` uses target/debug, built by `cargo build`)
# It runs the lab only (`setpoint run`, a few milliseconds a run); it never runs in `cargo test`.
set -euo pipefail

cd "$(dirname "$0")/.."
PROFILE=${PROFILE:-release}
if [ "$PROFILE" = release ]; then cargo build --release --quiet; else cargo build --quiet; fi
BIN=target/$PROFILE/setpoint
FILE=scenarios/rolling-update.toml
FORGETFUL=$(mktemp --suffix=.toml)
trap 'rm -f "$FORGETFUL"' EXIT
sed 's/^max_unavailable = 0$/max_unavailable = 0\ncounts_pending = false/' "$FILE" >"$FORGETFUL"
grep -q '^counts_pending = false$' "$FORGETFUL"

DELAYS=("$@")
[ ${#DELAYS[@]} -gt 0 ] || DELAYS=(0 5 10 11 15 20 30 45 60)
CONTROLLERS=(ledger intent expectations gated named)

cell() { # file controller G -> "above (seconds)"
    "$BIN" run "$1" --controller "$2" -G "$3" --format json |
        jq -r '"\(.surge + .rollout_overshoot) (\(if .rollout_done then "\(.rollout_done - 300) s" else "not done" end))"'
}

for rule in "counts its own pending work (the runtime's rule)" "counts only the ledger (counts_pending = false)"; do
    file=$FILE
    [[ $rule == counts\ only* ]] && file=$FORGETFUL
    echo
    echo "Rollout that $rule: most copies above desired 8 during the rollout (rollout time)"
    echo
    printf '| G (s) |'; printf ' %s |' "${CONTROLLERS[@]}"; echo
    printf '| --- |'; printf ' --- |%.0s' "${CONTROLLERS[@]}"; echo
    for g in "${DELAYS[@]}"; do
        printf '| %s |' "$g"
        for c in "${CONTROLLERS[@]}"; do printf ' %s |' "$(cell "$file" "$c" "$g")"; done
        echo
    done
done
