#!/usr/bin/env bash
# Slurm executor overhead (DESIGN 8, issues 24 and 25). Prints figures; never asserts timings.
#
# For each size N (default: 5000; e.g. `benches/slurm_overhead.sh scale 3 5000 20000`), R rounds side by
# side of:
#   - by hand: the same /bin/true runs as hand-written job arrays (`sbatch --array=A-B%J
#     --wrap=/bin/true`, pieces of at most 5,000 tasks, each piece re-submitted every 5 s until
#     Slurm accepts it, since MaxJobCount counts pending tasks), then `squeue -h -j IDS -o %i`
#     every 0.25 s until it lists none of them;
#   - hwr-exp: `hwr-exp run --executor slurm` of N runs of /bin/true, jobs = J (the node's CPUs).
# and prints for each: total time, CPU of the submitting side (user + sys, its children such as
# squeue and sbatch included: /usr/bin/time), CPU per run, peak RSS (with children, /usr/bin/time:
# the largest process of the tree, often an squeue; and the waiting process's own, VmHWM sampled
# every second), slurmctld's CPU
# (/proc/<pid>/stat) and its RPCs (`sdiag -r` before, `sdiag` after: all RPCs, and the job-info
# ones, REQUEST_JOB_INFO + REQUEST_JOB_INFO_SINGLE). min / median / max over the rounds.
#
# Needs a cluster the environment points at (`source $SLURM_TEST_DIR/slurm.env`). The figures in
# docs/benchmarks.md were measured on this one-node cluster, and the script says so when the cluster differs:
#
#   SLURM_FAKE_CPUS=16 SLURM_EXTRA_CONF=$'MaxArraySize=20001\nMaxJobCount=10000\nMinJobAge=300\nSchedulerParameters=batch_sched_delay=0' \
#     bash ../shared/slurm/start-slurm.sh
#
# - 16 CPUs: jobs = 16 on both sides, as in issue 24.
# - MaxJobCount=10000 (Slurm's default) with MinJobAge=300 (Slurm's default; start-slurm.sh's own
#   3600 would keep every finished record for an hour, so 20,000 runs could never all be submitted):
#   20,000 runs need pieces on both sides, and finished tasks keep their record for 5 minutes.
# - batch_sched_delay=0: Slurm's default of 3 s lets the scheduler start batch jobs at most once per
#   3 s, i.e. one node's worth of tasks (4 or 16) per 3 s, whoever submits them: the "about 2 tasks a
#   second" of the 4-CPU test cluster. With 0 this cluster starts ~20 tasks/s.
# - MaxArraySize above 5,000, so the hand-written pieces are 5,000 tasks.
# Before each side the script waits until Slurm holds no job record (finished tasks are purged
# MinJobAge after they end), so each side starts from an empty queue and sdiag counts only it.
# The machine's load average is printed with each side (on a shared machine only the side-by-side
# ratios mean something).
# SIDES="hand" or SIDES="hwr" runs one side only (default: "hand hwr", side by side), e.g. to
# measure the hand-written side once and compare several builds of hwr-exp against it.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-1}
shift || true
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(5000)
scontrol ping >/dev/null || { echo "no Slurm cluster answers (source \$SLURM_TEST_DIR/slurm.env)" >&2; exit 1; }
max=$(scontrol show config | awk '$1 == "MaxArraySize" {print $3}')
maxjobs=$(scontrol show config | awk '$1 == "MaxJobCount" {print $3}')
[ "$max" -gt 5000 ] || echo "note: MaxArraySize is $max: hand-written pieces of $((max - 1)) tasks (SLURM_EXTRA_CONF=MaxArraySize=20001 for pieces of 5,000)" >&2
minage=$(scontrol show config | awk '$1 == "MinJobAge" {print $3}')
schedp=$(scontrol show config | awk '$1 == "SchedulerParameters" {print $3}')
case $schedp in *batch_sched_delay=0*) ;; *) echo "note: SchedulerParameters=$schedp: without batch_sched_delay=0 Slurm starts batch jobs at most once per 3 s (see the header)" >&2 ;; esac
cpus=$(scontrol show node -o | tr ' ' '\n' | awk -F= '$1 == "CPUTot" {s += $2} END {print s}')
jobcomp=$(scontrol show config | awk '$1 == "JobCompLoc" {print $3}')
[ -w "$jobcomp" ] || { echo "the hand-written side counts COMPLETED tasks in JobCompLoc ($jobcomp): not writable here" >&2; exit 1; }
ctld_pid=$(cat "${SLURM_TEST_DIR:-/tmp/slurmtest}/run/slurmctld.pid")
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
echo "cluster: MaxArraySize=$max, MaxJobCount=$maxjobs, MinJobAge=$minage s, SchedulerParameters=$schedp, $cpus CPUs, $(nproc) real CPUs; jobs = $cpus; $rounds round(s) of ${sizes[*]} runs of /bin/true"

now() { date +%s.%N; }
ctld_cpu() { awk '{printf "%.2f\n", ($14 + $15) / 100}' "/proc/$ctld_pid/stat"; }
rpcs() { sdiag | awk '/by message type/ {on = 1; next} /by user/ {on = 0} on && /count:/ {
  split($0, a, "count:"); split(a[2], b, " "); n += b[1]; if ($1 ~ /^REQUEST_JOB_INFO(_SINGLE)?$/) j += b[1] }
  END {print n + 0, j + 0}'; }

# by_hand N: prints nothing; the submitting loop as a person would write it.
cat > "$work/by_hand.sh" <<'EOF'
#!/usr/bin/env bash
set -euo pipefail
n=$1 jobs=$2 piece=$(( $3 - 1 < 5000 ? $3 - 1 : 5000 )) ids=()
for ((start = 0; start < n; start += piece)); do
  end=$((start + piece < n ? start + piece - 1 : n - 1))
  until id=$(sbatch --parsable --array=$start-$end%$jobs --output=/dev/null --error=/dev/null --wrap=/bin/true 2>/dev/null); do
    sleep 5
  done
  ids+=("$id")
done
all=$(IFS=,; echo "${ids[*]}")
while [ -n "$(squeue -h -j "$all" -o %i 2>/dev/null | head -1)" ]; do sleep 0.25; done
EOF
chmod +x "$work/by_hand.sh"

cat > "$work/true.toml" <<EOF
format = 1
[experiment]
name = "slurm-true"
[command]
argv = ["/bin/true"]
output-format = "text"
[schedule]
repetitions = 1
jobs = $cpus
[isolation]
timeout = "60s"
[executor]
kind = "slurm"
EOF

# Waits until Slurm holds no job record (MinJobAge after the last task ended, plus the purge
# interval), so that each side starts from an empty queue; says how long it waited on stderr.
drain() {
  local t0 left
  t0=$(now)
  while left=$(squeue -h -a -t all -o %i 2>/dev/null | wc -l) && [ "$left" -gt 0 ]; do sleep 5; done
  printf '  (waited %.0f s for Slurm to purge the previous records)\n' "$(echo "$(now) - $t0" | bc)" >&2
}
load() { cut -d' ' -f1-3 /proc/loadavg; }
# own_peak PID: while PID (/usr/bin/time) lives, the VmHWM (KiB) of its child (the waiter or the
# hand-written loop) every second; prints the last one seen.
own_peak() {
  local t=$1 w hwm=0 v
  while kill -0 "$t" 2>/dev/null; do
    w=$(pgrep -P "$t" | head -1)
    if [ -n "$w" ]; then
      v=$(awk '/^VmHWM/ {print $2}' "/proc/$w/status" 2>/dev/null) && [ -n "$v" ] && hwm=$v
    fi
    sleep 1
  done
  echo "$hwm"
}

# measure SIDE N: runs one side, prints "seconds cpu_seconds peak_kib ctld_cpu rpcs jobinfo_rpcs
# completed own_peak_kib" (completed: tasks that ended COMPLETED by hand, runs `ok` in the bundle for hwr-exp);
# the load average before and after goes to stderr.
measure() {
  local side=$1 n=$2 t0 t1 c0 c1 usage rc=0 done_ u s m all job
  drain
  echo "  $side $n: load average before $(load)" >&2
  : > "$jobcomp"
  sdiag -r >/dev/null
  c0=$(ctld_cpu)
  t0=$(now)
  if [ "$side" = hand ]; then
    /usr/bin/time -f '%U %S %M' -o "$work/time" "$work/by_hand.sh" "$n" "$cpus" "$max" &
  else
    sed "s/^repetitions = .*/repetitions = $n/" "$work/true.toml" > "$work/m.toml"
    /usr/bin/time -f '%U %S %M' -o "$work/time" "$bin" run "$work/m.toml" --results-dir "$work/results" --quiet >/dev/null &
  fi
  local tp=$! op
  own_peak "$tp" > "$work/own" &
  op=$!
  wait "$tp" || rc=$?
  wait "$op"
  t1=$(now)
  c1=$(ctld_cpu)
  read -r all job <<<"$(rpcs)"
  if [ "$side" = hand ]; then
    done_=$(grep -c 'JobState=COMPLETED' "$jobcomp" || true)
  else
    done_=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["counts"].get("ok", 0))' "$work"/results/*/*/bundle.json)
    rm -rf "$work/results"
  fi
  echo "  $side $n: exit $rc, load average after $(load)" >&2
  usage=$(tail -1 "$work/time")
  read -r u s m <<<"$usage"
  echo "$(echo "$t1 - $t0" | bc) $(echo "$u + $s" | bc) $m $(echo "$c1 - $c0" | bc) $all $job $done_ $(cat "$work/own")"
}

stats() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {printf "%.2f / %.2f / %.2f", a[1], a[int((NR + 1) / 2)], a[NR]}'; }
col() { local k=$1; shift; for line in "$@"; do echo "$line" | awk -v k="$k" '{print $k}'; done; }

sides=${SIDES:-hand hwr}
for n in "${sizes[@]}"; do
  hand=() hwr=()
  for r in $(seq 1 "$rounds"); do
    h=- x=-
    case " $sides " in *" hand "*) h=$(measure hand "$n"); hand+=("$h") ;; esac
    case " $sides " in *" hwr "*) x=$(measure hwr "$n"); hwr+=("$x") ;; esac
    echo "$n runs, round $r: by hand [s cpu-s peak-KiB ctld-cpu-s rpcs job-info-rpcs completed own-peak-KiB] $h; hwr-exp $x"
  done
  echo "== $n runs (min / median / max over $rounds round(s))"
  for side in $sides; do
    if [ "$side" = hand ]; then lines=("${hand[@]}"); name="by hand"; else lines=("${hwr[@]}"); name="hwr-exp"; fi
    mapfile -t per < <(for l in "${lines[@]}"; do echo "$l" | awk -v n="$n" '{printf "%.4f\n", $2 * 1000 / n}'; done)
    echo "  $name: total $(stats $(col 1 "${lines[@]}")) s; CPU $(stats $(col 2 "${lines[@]}")) s = $(stats "${per[@]}") ms per run; peak RSS with children $(stats $(col 3 "${lines[@]}")) KiB, own $(stats $(col 8 "${lines[@]}")) KiB"
    echo "  $name: slurmctld CPU $(stats $(col 4 "${lines[@]}")) s; RPCs $(stats $(col 5 "${lines[@]}")), job-info RPCs $(stats $(col 6 "${lines[@]}")); completed $(stats $(col 7 "${lines[@]}")) of $n"
    echo "  $name: $(stats $(for l in "${lines[@]}"; do echo "$l" | awk '{printf "%.2f\n", $7 / $1}'; done)) tasks/s"
  done
done
