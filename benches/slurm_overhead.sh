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
# Needs a cluster the environment points at (`source $SLURM_TEST_DIR/slurm.env`) whose
# MaxArraySize exceeds N (start-slurm.sh's default 1001; CI's MaxArraySize=11 would compare 19
# chained arrays with an sbatch that Slurm refuses).
# Usage: benches/slurm_overhead.sh [runs=200] [rounds=3]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-200}
rounds=${2:-3}
scontrol ping >/dev/null || { echo "no Slurm cluster answers (source \$SLURM_TEST_DIR/slurm.env)" >&2; exit 1; }
max=$(scontrol show config | awk '$1 == "MaxArraySize" {print $3}')
if [ "$max" -le "$runs" ]; then
  echo "MaxArraySize is $max: restart the cluster without SLURM_EXTRA_CONF=MaxArraySize=... for $runs runs" >&2
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
echo "cluster: MaxArraySize=$max, $cpus CPUs; $runs runs of /bin/true, $rounds rounds; hwr-exp jobs = $cpus"

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

now() { date +%s.%N; }

by_hand() {
  local t0 id
  t0=$(now)
  id=$(sbatch --parsable --array=0-$((runs - 1)) --output=/dev/null --error=/dev/null --wrap=/bin/true)
  while [ -n "$(squeue -h -j "$id" -o %i 2>/dev/null)" ]; do sleep 0.25; done
  echo "$(now) - $t0" | bc
}

through_hwr() {
  local t0
  t0=$(now)
  "$bin" run "$work/true.toml" --results-dir "$work/results" --quiet >/dev/null
  echo "$(now) - $t0" | bc
}

hand=() hwr=() ratio=()
for r in $(seq 1 "$rounds"); do
  h=$(by_hand)
  x=$(through_hwr)
  q=$(echo "scale=3; $x / $h" | bc)
  hand+=("$h") hwr+=("$x") ratio+=("$q")
  printf 'round %d: by hand %.2f s, hwr-exp %.2f s, ratio %.2f\n' "$r" "$h" "$x" "$q"
done
stats() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {printf "min %.2f  median %.2f  max %.2f", a[1], a[int((NR + 1) / 2)], a[NR]}'; }
echo "by hand ($runs tasks):  $(stats "${hand[@]}") s"
echo "hwr-exp ($runs runs):   $(stats "${hwr[@]}") s"
echo "ratio hwr-exp/by hand:  $(stats "${ratio[@]}")"

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
