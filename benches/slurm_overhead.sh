#!/usr/bin/env bash
# Slurm executor overhead (DESIGN 8). Prints figures; never asserts timings.
#
#   1. N runs of /bin/true through `hwr-exp run --executor slurm` (jobs = the node's CPUs) against
#      the same array submitted by hand (`sbatch --array=0-(N-1) --wrap=/bin/true`, then polling
#      `squeue` every 0.25 s until it lists none of its tasks), side by side for R rounds:
#      min / median / max of each and of the ratio.
#   2. A 5,000-run plan: wall time of `hwr-exp run --detach` (plan, bundle, provenance, scripts,
#      every sbatch) and time from its start until the first task started (the first run.json's
#      `start`); then `hwr-exp cancel`.
#
#   With mode `two-nodes` (third argument; a cluster of two or more nodes, e.g. start-slurm.sh
#   with SLURM_NODES=2): part 1 only, the hand-written array is a batch script of the same
#   shape as hwr-exp's (one task, --cpus-per-task=1, --time, --no-requeue,
#   --array=0-(N-1)%CPUs, /bin/true), and each round prints how many tasks each node ran
#   (hwr-exp: run.json `node`; by hand: squeue %N of the finished tasks, kept for MinJobAge).
#
# Needs a cluster the environment points at (`source $SLURM_TEST_DIR/slurm.env`) whose
# MaxArraySize exceeds N (start-slurm.sh's default 1001; CI's MaxArraySize=11 would compare 19
# chained arrays with an sbatch that Slurm refuses).
#   With `scale` as first argument: waiter CPU per run, slurmctld CPU and RPCs (sdiag) and total
#   time beside hand-written arrays for large plans (5,000 and 20,000 runs, pieces under
#   MaxJobCount): benches/slurm_overhead_scale.sh, which says more.
# Usage: benches/slurm_overhead.sh [runs=200] [rounds=3] [mode=one|two-nodes]
#        benches/slurm_overhead.sh scale [rounds=1] [sizes...=5000]
set -euo pipefail
if [ "${1:-}" = scale ]; then
  shift
  exec bash "$(dirname "$0")/slurm_overhead_scale.sh" "$@"
fi
cd "$(dirname "$0")/.."
runs=${1:-200}
rounds=${2:-3}
mode=${3:-one}
case $mode in one|two-nodes) ;; *) echo "mode must be one or two-nodes, not $mode" >&2; exit 2 ;; esac
scontrol ping >/dev/null || { echo "no Slurm cluster answers (source \$SLURM_TEST_DIR/slurm.env)" >&2; exit 1; }
max=$(scontrol show config | awk '$1 == "MaxArraySize" {print $3}')
if [ "$max" -le "$runs" ]; then
  echo "MaxArraySize is $max: restart the cluster without SLURM_EXTRA_CONF=MaxArraySize=... for $runs runs" >&2
  exit 1
fi
nodes=$(sinfo -h -N -o %N | sort -u | wc -l)
if [ "$mode" = two-nodes ] && [ "$nodes" -lt 2 ]; then
  echo "mode two-nodes needs two nodes; this cluster has $nodes (start-slurm.sh with SLURM_NODES=2)" >&2
  exit 1
fi
cpus=$(scontrol show node -o | tr ' ' '\n' | awk -F= '$1 == "CPUTot" {s += $2} END {print s}')
# HWR_EXP=path/to/hwr-exp to measure another build (default: a release build of this tree).
if [ -n "${HWR_EXP:-}" ]; then
  bin=$(realpath "$HWR_EXP")
else
  cargo build --release --quiet
  bin=$PWD/target/release/hwr-exp
fi
# The bundles go to a folder the node can write (here: the same machine).
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "cluster: MaxArraySize=$max, $nodes node(s), $cpus CPUs; mode $mode; $runs runs of /bin/true, $rounds rounds; hwr-exp jobs = $cpus"

cat > "$work/true.toml" <<EOF
format = 1
[experiment]
name = "slurm-true"
[command]
argv = ["/bin/true"]
output-format = "text"
[schedule]
repetitions = $runs
jobs = $cpus
[isolation]
timeout = "60s"
[executor]
kind = "slurm"
EOF

# The hand-written batch script of mode two-nodes: hwr-exp's resource lines (timeout 60s +
# grace 5s + time-margin 60s), /bin/true.
cat > "$work/hand.sbatch" <<EOF
#!/bin/bash
#SBATCH --job-name=by-hand
#SBATCH --time=00:02:05
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=1
#SBATCH --no-requeue
#SBATCH --output=/dev/null
#SBATCH --error=/dev/null
#SBATCH --array=0-$((runs - 1))%$cpus
exec /bin/true
EOF

now() { date +%s.%N; }

# Sets `took` (seconds) and `last_hand` (the array's job id).
by_hand() {
  local t0 id
  t0=$(now)
  if [ "$mode" = two-nodes ]; then
    id=$(sbatch --parsable "$work/hand.sbatch")
  else
    id=$(sbatch --parsable --array=0-$((runs - 1)) --output=/dev/null --error=/dev/null --wrap=/bin/true)
  fi
  while [ -n "$(squeue -h -j "$id" -o %i 2>/dev/null)" ]; do sleep 0.25; done
  took=$(echo "$(now) - $t0" | bc)
  last_hand=$id
}

# Sets `took` and `last_bundle`.
through_hwr() {
  local t0
  t0=$(now)
  last_bundle=$("$bin" run "$work/true.toml" --results-dir "$work/results" --quiet)
  took=$(echo "$(now) - $t0" | bc)
}

# Tasks per node, `n1 103, n2 97`: of a finished array (squeue -t all keeps them for MinJobAge),
# and of a bundle (run.json `node`).
hand_nodes() { squeue -h -t all -j "$1" -o %N 2>/dev/null | sort | uniq -c | awk '{printf "%s%s %d", s, $2, $1; s = ", "}'; }
hwr_nodes() {
  python3 -c '
import collections, json, pathlib, sys
c = collections.Counter(json.load(open(p)).get("node", "?") for p in pathlib.Path(sys.argv[1], "runs").glob("*/run.json"))
print(", ".join(f"{n} {k}" for n, k in sorted(c.items())))
' "$1"
}

hand=() hwr=() ratio=()
for r in $(seq 1 "$rounds"); do
  by_hand; h=$took
  through_hwr; x=$took
  q=$(echo "scale=3; $x / $h" | bc)
  hand+=("$h") hwr+=("$x") ratio+=("$q")
  printf 'round %d: by hand %.2f s, hwr-exp %.2f s, ratio %.2f\n' "$r" "$h" "$x" "$q"
  if [ "$mode" = two-nodes ]; then
    echo "  tasks per node: by hand $(hand_nodes "$last_hand"); hwr-exp $(hwr_nodes "$(realpath "$last_bundle")")"
  fi
done
stats() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {printf "min %.2f  median %.2f  max %.2f", a[1], a[int((NR + 1) / 2)], a[NR]}'; }
echo "by hand ($runs tasks):  $(stats "${hand[@]}") s"
echo "hwr-exp ($runs runs):   $(stats "${hwr[@]}") s"
echo "ratio hwr-exp/by hand:  $(stats "${ratio[@]}")"

[ "$mode" = one ] || exit 0

# 2. Submitting 5,000 runs.
sed -e "s/^repetitions = .*/repetitions = 5000/" -e 's/^name = .*/name = "slurm-5000"/' "$work/true.toml" > "$work/big.toml"
t0=$(now)
bundle=$("$bin" run "$work/big.toml" --results-dir "$work/results" --detach --quiet)
t1=$(now)
first=""
for _ in $(seq 1 600); do
  first=$(find "$bundle/runs" -name run.json -print -quit 2>/dev/null || true)
  [ -n "$first" ] && break
  sleep 0.05
done
t2=$(now)
printf '5,000-run plan: run --detach returned after %.2f s; first task finished its run.json %.2f s after the start\n' \
  "$(echo "$t1 - $t0" | bc)" "$(echo "$t2 - $t0" | bc)"
arrays=$(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))['slurm']['arrays']))" "$bundle/bundle.json" 2>/dev/null || echo "?")
echo "  ($arrays arrays)"
"$bin" cancel "$bundle" 2>/dev/null || true
