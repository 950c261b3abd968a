#!/usr/bin/env bash
# How much hwr-exp's memory sampling slows a large program (issue 20, DESIGN 4: at most about 1%,
# target within 5% of the hand-run time). The workload (benches/sampling/mmap_loop.c) maps SIZE
# MiB, touches it, then loops ITERATIONS times over mmap + touch + munmap: each munmap waits while
# a page-table walk of the process (smaps_rollup) holds its memory-map lock.
#
# Alternated pairs: the program by hand (pinned with `taskset` to the CPU hwr-exp's `cpus = "auto"`
# picks, the first allowed one: an unpinned program may use both CPUs of a loaded 2-CPU machine),
# then under `hwr-exp run` with default settings (sampling every 100ms), PAIRS times. Prints the program's own total time (its clock, so hwr-exp's start-up
# is not counted) for both, min/median/max, and the ratio hwr-exp/hand per pair. Never asserts.
# Usage: benches/sampling_perturbation.sh [size-mib=auto] [iterations=200000] [pairs=5] [interval=default]
# size-mib auto: 4096 where MemAvailable is above 12 GiB, else 2048 (the figure printed says which).
set -euo pipefail
cd "$(dirname "$0")/.."
avail_kib=$(awk '/MemAvailable/ {print $2}' /proc/meminfo)
default_size=$(( avail_kib > 12 * 1024 * 1024 ? 4096 : 2048 ))
size=${1:-$default_size}
iterations=${2:-200000}
pairs=${3:-5}
interval=${4:-}
# HWR_EXP_BIN: a binary to measure instead of building target/release/hwr-exp.
if [ -n "${HWR_EXP_BIN:-}" ]; then bin=$HWR_EXP_BIN; else cargo build --release --quiet; bin=$PWD/target/release/hwr-exp; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cc -O2 -o "$work/mmap_loop" benches/sampling/mmap_loop.c
measure_section=""
if [ -n "$interval" ]; then measure_section=$'[measure]\nsample-interval = "'"$interval"'"'; fi
cat > "$work/perturb.toml" <<TOML
format = 1
[experiment]
name = "perturb"
[command]
argv = ["$work/mmap_loop", "$size", "$iterations"]
[schedule]
repetitions = 1
[isolation]
timeout = "600s"
$measure_section
TOML
cpu=$(python3 -c 'import os; print(min(os.sched_getaffinity(0)))')
echo "workload: map ${size} MiB, touch, ${iterations} x (mmap + touch + munmap of 64 KiB); ${pairs} alternated pairs"
echo "hwr-exp: sample-interval ${interval:-default (100ms)}; both pinned to CPU $cpu; $(nproc) CPUs; MemAvailable $((avail_kib / 1024)) MiB; load $(cut -d' ' -f1-3 /proc/loadavg)"
: > "$work/times"
for i in $(seq 1 "$pairs"); do
  hand=$(taskset -c "$cpu" "$work/mmap_loop" "$size" "$iterations" | python3 -c 'import json,sys; print(json.load(sys.stdin)["total-seconds"])')
  rm -rf "$work/results"
  "$bin" run "$work/perturb.toml" --quiet --results-dir "$work/results" > /dev/null 2>&1
  run=$(ls -d "$work"/results/perturb/*/runs/*)
  hwr=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["total-seconds"])' "$run"/*-r1.json)
  python3 - "$run/run.json" "$hand" "$hwr" >> "$work/times" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
s = r.get("sampling") or {}
print(sys.argv[2], sys.argv[3], s.get("samples", 0), s.get("walk-samples", 0), s.get("walk-cost-seconds", 0),
      s.get("longest-walk-seconds", 0), r.get("cgroup-memory-peak-bytes") or 0)
PY
  tail -1 "$work/times" | awk -v i="$i" '{printf "pair %d: hand %.3f s, hwr-exp %.3f s (ratio %.3f); %d samples, %d walks (%.1f ms in walks, longest %.1f ms)\n", i, $1, $2, $2/$1, $3, $4, $5*1000, $6*1000}'
done
python3 - "$work/times" <<'PY'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
def mmm(v): return f"min {min(v):.3f}  median {statistics.median(v):.3f}  max {max(v):.3f}"
print("hand run (s):      ", mmm([r[0] for r in rows]))
print("under hwr-exp (s): ", mmm([r[1] for r in rows]))
print("ratio per pair:    ", mmm([r[1] / r[0] for r in rows]), " (target <= 1.05)")
PY
