#!/usr/bin/env bash
# Mutation testing of the runtime's logic with the chaos checker as the test: issue 22 part 3,
# docs/chaos.md, "Issue 22 part 3: mutation testing (measured checker strength)".
#
# Usage: scripts/mutants.sh [SAMPLE] [OUT] [NAMES]
#   SAMPLE  how many mutants to test (default 60): the first SAMPLE of the population shuffled by
#           `shuf` from a seeded stream of random bytes (AES-256-CTR of zeros under the pass
#           phrase 22, as coreutils' manual suggests for repeatable shuffles): a uniform random
#           sample, the same one on every run of the same source, coreutils and OpenSSL. (Not
#           `--random-source=<(yes 22)`: three repeating bytes shuffle far from uniformly.)
#   OUT     where the population, the sample, the logs and the outcomes go (default
#           /tmp/mutants-run; keep it outside the repository)
#   NAMES   optional: a file of mutant names, one a line, `INDEX<TAB>NAME` or `NAME`, tested
#           instead of the sample (SAMPLE is then ignored), in its order, each under its own
#           index: to test again some mutants of an earlier sample (the survivors, after a new
#           check), or a sample drawn from an earlier tree mapped onto the current one's names
#           (a name carries its line, which moves as the code changes)
#
# Overflow checks are on in the mutants' release build (CARGO_PROFILE_RELEASE_OVERFLOW_CHECKS,
# as in a debug build): a mutant that makes a counter wrap panics where the world reaches it,
# instead of wrapping silently. The baseline is built the same way, so the test must pass with
# them on.
#
# The population: every mutant `cargo mutants --list` generates in the controller
# (crates/setpoint-runtime/src/controller/**/*.rs), the agent (agent/**/*.rs), the watch cache
# (cache.rs) and the node model (model/node.rs), except the two tokio drivers
# (controller/driver.rs, agent/driver.rs), which the chaos world replaces and so never runs.
# `**`, not `*`: the host and the agent's core are split into files under controller/host/ and
# agent/core/ (b238e4d, dc2a36f), which `controller/*.rs` and `agent/*.rs` do not match (their
# tests.rs files are `#[cfg(test)]` modules, which cargo-mutants leaves out). On b6b3cff, where
# neither directory existed, both globs list the same 1,400.
#
# The test of each mutant: the chaos checker over the shipped fault models,
# `cargo test --profile release -p setpoint-chaos --test models -- --ignored`
# (crates/setpoint-chaos/tests/models.rs: seeds 1..=60 of each scenarios/chaos/*.toml, every
# check). Not the runtime's unit tests: a mutant is caught only if the checker notices it.
#
# How: the test is first run once on the unmutated tree (the baseline; the script stops if it
# fails), then each sampled mutant is tested in its own `cargo mutants --in-place` run, one after
# another, in the sample's order, selected by its exact name (`--re`) and by a diff that touches
# its line alone (`--in-diff`): cargo-mutants 27.1.0 applies neither `--re` nor `--exclude-re`
# to its "delete field" mutants, and a field deletion's span reaches the next field's line, so a
# field deletion can bring its neighbour along; the outcome recorded is the named mutant's. In place, so that the
# release build of the dependencies is reused from CARGO_TARGET_DIR (default ./target); the
# release profile is made cheaper to rebuild by environment (no LTO, 16 codegen units,
# incremental, no debug info). `--test=models` goes to every cargo command (`--cargo-arg`), so the
# build builds that test alone, not the crate's unit tests and examples too (cargo-mutants passes
# its cargo-test arguments to the test run only, not to the build). Everything runs under
# `nice -n 19`, two jobs at most.
#
# Stopping early: `touch OUT/stop`. The script stops between two mutants, never inside one (an
# interrupted in-place run could leave a mutated file), and the mutants tested so far are a prefix
# of the shuffled population: still a uniform random sample, of fewer mutants.
#
# Output: OUT/population.txt, OUT/sample.txt (OUT/sample.tsv with the indices), OUT/results.tsv (one line per mutant: index,
# outcome caught|missed|timeout|unviable, seconds, load average, name), OUT/mNNN/mutants.out/
# (cargo-mutants' own output and logs per mutant), OUT/summary.txt.
# Exit status: 0 when the run ends (missed mutants are results, not errors); 1 if the baseline
# fails or a mutant is left in the tree; 2 if cargo-mutants is missing.
set -euo pipefail

cd "$(dirname "$0")/.."
sample="${1:-60}"
out="${2:-/tmp/mutants-run}"
names="${3:-}"
test_timeout="${MUTANTS_TEST_TIMEOUT:-300}"
build_timeout="${MUTANTS_BUILD_TIMEOUT:-1500}"

if ! cargo mutants --version >/dev/null 2>&1; then
    echo "cargo-mutants is missing: nice -n 19 cargo install cargo-mutants --locked" >&2
    exit 2
fi
mkdir -p "$out"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
export CARGO_PROFILE_RELEASE_LTO=false
export CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16
export CARGO_PROFILE_RELEASE_INCREMENTAL=true
export CARGO_PROFILE_RELEASE_DEBUG=false
export CARGO_PROFILE_RELEASE_OVERFLOW_CHECKS=true

src=crates/setpoint-runtime/src
load() { uptime | sed 's/.*load average: //'; }
clean() { git diff --quiet -- "$src"; }
if ! clean; then
    echo "$src has uncommitted changes: the mutants run in place; commit or stash them" >&2
    exit 1
fi

{
    cargo mutants --version
    echo "started $(date -u '+%F %T') UTC; load $(load); sample $sample; out $out"
} | tee "$out/summary.txt"

# The population, per file, and the sample.
nice -n 19 cargo mutants --list --no-config -p setpoint-runtime \
    -f "$src/controller/**/*.rs" -f "$src/agent/**/*.rs" -f "$src/cache.rs" -f "$src/model/node.rs" \
    -e "$src/controller/driver.rs" -e "$src/agent/driver.rs" >"$out/population.txt"
{
    echo "population: $(wc -l <"$out/population.txt") mutants"
    cut -d: -f1 "$out/population.txt" | sort | uniq -c | sort -rn
} | tee -a "$out/summary.txt"
seeded() { openssl enc -aes-256-ctr -pass pass:"$1" -nosalt </dev/zero 2>/dev/null; }
shuf --random-source=<(seeded 22) "$out/population.txt" >"$out/shuffled.txt"
if [ -n "$names" ]; then
    # Each line INDEX<TAB>NAME, or NAME (then numbered from 1).
    awk -F'\t' 'NF >= 2 { print $1 "\t" $2; next } { print NR "\t" $0 }' "$names" >"$out/sample.tsv"
else
    head -n "$sample" "$out/shuffled.txt" | awk '{ print NR "\t" $0 }' >"$out/sample.tsv"
fi
cut -f2 "$out/sample.tsv" >"$out/sample.txt"
missing=$(grep -Fxvf "$out/population.txt" "$out/sample.txt" || true)
if [ -n "$missing" ]; then
    echo "not in this tree's population: $missing" >&2
    exit 1
fi
openssl version >>"$out/summary.txt"

# The baseline: the test passes on the unmutated tree.
test_cmd=(cargo test --profile release -j 2 -p setpoint-chaos --test models -- --ignored)
start=$(date +%s)
if ! nice -n 19 "${test_cmd[@]}" >"$out/baseline.log" 2>&1; then
    echo "the baseline failed: see $out/baseline.log" >&2
    exit 1
fi
echo "baseline: build and test $(($(date +%s) - start)) s; load $(load)" | tee -a "$out/summary.txt"
start=$(date +%s)
nice -n 19 "${test_cmd[@]}" >"$out/baseline-test.log" 2>&1
echo "baseline: test alone $(($(date +%s) - start)) s; load $(load)" | tee -a "$out/summary.txt"

: >"$out/results.tsv"
while IFS=$'\t' read -r i name; do
    if [ -e "$out/stop" ]; then
        echo "stopped by $out/stop before mutant $i" | tee -a "$out/summary.txt"
        break
    fi
    dir=$(printf '%s/m%03d' "$out" "$((10#$i))")
    # The exact name as a regex: escape every character the regex crate treats as special.
    re="^$(printf '%s' "$name" | sed 's/[][\\.*+?(){}|^$]/\\&/g')\$"
    # A diff that touches the mutant's line and changes nothing.
    file=${name%%:*}
    rest=${name#*:}
    line=${rest%%:*}
    text=$(sed -n "${line}p" "$file")
    printf -- '--- a/%s\n+++ b/%s\n@@ -%d,1 +%d,1 @@\n-%s\n+%s\n' \
        "$file" "$file" "$line" "$line" "$text" "$text" >"$dir.diff"
    start=$(date +%s)
    nice -n 19 cargo mutants --in-place --no-config --baseline=skip --no-shuffle \
        -p setpoint-runtime --re "$re" --in-diff "$dir.diff" --jobserver-tasks 2 \
        --test-package setpoint-chaos --profile release \
        --timeout "$test_timeout" --build-timeout "$build_timeout" \
        --cargo-arg=--test=models --cargo-test-arg=-- --cargo-test-arg=--ignored \
        -o "$dir" >"$dir.log" 2>&1 || true
    secs=$(($(date +%s) - start))
    outcome=none
    for o in caught missed timeout unviable; do
        if grep -Fxq -- "$name" "$dir/mutants.out/$o.txt" 2>/dev/null; then outcome=$o; fi
    done
    printf '%d\t%s\t%d\t%s\t%s\n' "$i" "$outcome" "$secs" "$(load)" "$name" |
        tee -a "$out/results.tsv"
    if [ "$outcome" = none ]; then
        echo "mutant $i has no outcome: see $dir.log" >&2
        tail -n 20 "$dir.log" >&2
        exit 1
    fi
    if ! clean; then
        echo "mutant $i was left in $src: git diff shows it; restore it by hand" >&2
        exit 1
    fi
done <"$out/sample.tsv"

{
    echo "ended $(date -u '+%F %T') UTC; load $(load)"
    echo "tested: $(wc -l <"$out/results.tsv")"
    cut -f2 "$out/results.tsv" | sort | uniq -c
} | tee -a "$out/summary.txt"
