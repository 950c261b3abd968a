#!/usr/bin/env bash
# Runner overhead benchmarks. Prints figures and ratios against the named baselines (the seed's
# shell loop, `hyperfine -N`); never asserts timings.
# Usage: benches/run_overhead.sh [runs=500] [rounds=5]
# The results go to a folder made with `mktemp -d`, so TMPDIR chooses the file system. ext4 makes
# new files slowly for a while after many were deleted (its inode allocator steps over recently
# freed inodes), and hwr-exp makes five per run where the loop and hyperfine make none: run it on
# a file system that has not just lost many files, and say which it was.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-500}
rounds=${2:-5}
cargo build --release --quiet
bin=$PWD/target/release/hwr-exp
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "results folder: $work ($(df -T "$work" | awk 'NR==2 {print $2 " on " $1}'))"

# measure CMD...: prints "<wall seconds> <peak RSS KiB> <CPU seconds>" of the command and its children.
# CPU seconds (user + system of the whole process tree) are the load-independent figure on a busy machine.
measure() {
  python3 - "$@" <<'PY'
import resource, subprocess, sys, time
t = time.perf_counter()
subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)
wall = time.perf_counter() - t
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"{wall:.3f} {ru.ru_maxrss} {ru.ru_utime + ru.ru_stime:.3f}")
PY
}

manifest() { # name repetitions sample-interval
  cat > "$work/$1.toml" <<EOF
format = 1
[experiment]
name = "$1"
[command]
argv = ["/bin/true"]
output-format = "text"
[schedule]
repetitions = $2
[isolation]
timeout = "120s"
[measure]
sample-interval = "$3"
EOF
}

manifest true-100ms "$runs" 100ms
manifest true-off "$runs" off
manifest probe 1 off

# Side by side, in rounds (the machine's load changes between rounds; ratios within a round are
# fairer than figures across rounds): the seed's shell loop, `hyperfine -N` of /bin/true, and
# hwr-exp with its default containment (a per-run cgroup where one can be made) and with the
# process-tree fallback forced, each with memory sampling at 100ms and off.
echo "== $runs runs of /bin/true, $rounds rounds side by side"
containment=$(HWR_CONTAINMENT= "$bin" run "$work/probe.toml" --quiet --results-dir "$work/probe" >/dev/null 2>&1;
  python3 -c 'import json,glob,sys; print(json.load(open(glob.glob(sys.argv[1] + "/*/*/runs/*/run.json")[0])).get("containment", "?"))' "$work/probe")
echo "default containment here: $containment"
has_hyperfine=1
command -v hyperfine >/dev/null || { has_hyperfine=0; echo "hyperfine not found (apt-get install -y hyperfine): its column is skipped"; }
: > "$work/rounds.tsv"
for round in $(seq "$rounds"); do
  read -r loop_s _ loop_cpu < <(measure bash -c "for i in \$(seq $runs); do CUDA_VISIBLE_DEVICES='' timeout 120s taskset -c 0 true; done")
  printf "loop\t%s\t%s\n" "$(awk "BEGIN{print $loop_s * 1000 / $runs}")" "$loop_cpu" >> "$work/rounds.tsv"
  if [ "$has_hyperfine" = 1 ]; then
    hyperfine -N --runs "$runs" --warmup 20 --export-json "$work/hf.json" /bin/true >/dev/null 2>&1
    printf "hyperfine\t%s\t-\n" "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["results"][0]["mean"] * 1000)' "$work/hf.json")" >> "$work/rounds.tsv"
  fi
  for mode in auto process-tree; do
    for interval in 100ms off; do
      # Results accumulate (deleted at exit): ext4 slows down the creation of new files while
      # many were deleted moments ago, which would charge hwr-exp for the benchmark's cleanup.
      read -r s _ cpu < <(HWR_CONTAINMENT=$mode measure "$bin" run "$work/true-$interval.toml" --quiet --results-dir "$work/results")
      printf "hwr-exp %s %s\t%s\t%s\n" "$mode" "$interval" "$(awk "BEGIN{print $s * 1000 / $runs}")" "$cpu" >> "$work/rounds.tsv"
    done
  done
  echo "round $round done (load $(cut -d' ' -f1 /proc/loadavg))"
done
python3 - "$work/rounds.tsv" "$rounds" <<'PY'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
rounds = int(sys.argv[2])
by = {}
for name, ms, cpu in rows:
    by.setdefault(name, []).append((float(ms), None if cpu == "-" else float(cpu)))
def mmm(xs):
    xs = sorted(xs)
    return f"min {xs[0]:.2f} / median {statistics.median(xs):.2f} / max {xs[-1]:.2f}"
for name in ["loop", "hyperfine"]:
    if name in by:
        print(f"{name:28} ms/run: {mmm([m for m, _ in by[name]])}")
for name, vals in by.items():
    if not name.startswith("hwr-exp"):
        continue
    print(f"{name:28} ms/run: {mmm([m for m, _ in vals])}")
    loop = by["loop"]
    print(f"{'':28} / loop (target <= 0.5x): {mmm([m / l[0] for (m, _), l in zip(vals, loop)])}")
    print(f"{'':28} / loop, CPU seconds:      {mmm([c / l[1] for (_, c), l in zip(vals, loop)])}")
    if "hyperfine" in by:
        hf = by["hyperfine"]
        print(f"{'':28} / hyperfine (target <= 2x): {mmm([m / h[0] for (m, _), h in zip(vals, hf)])}")
PY

echo "== runner peak RSS, 100 vs 10000 runs (sample-interval off)"
manifest rss-100 100 off
manifest rss-10000 10000 off
read -r _ rss100 _ < <(measure "$bin" run "$work/rss-100.toml" --quiet --results-dir "$work/results")
read -r s10k rss10k _ < <(measure "$bin" run "$work/rss-10000.toml" --quiet --results-dir "$work/results")
printf "peak RSS: 100 runs %d KiB, 10000 runs %d KiB (%.1f s): difference %d KiB (target <= 5120 KiB)\n" \
  "$rss100" "$rss10k" "$s10k" "$((rss10k - rss100))"

echo "== hwr-exp plan of a 100,000-run matrix"
cat > "$work/big.toml" <<EOF
format = 1
[experiment]
name = "big"
[command]
argv = ["/bin/true", "{a}", "{b}"]
[matrix]
a = [$(seq -s, 0 999)]
b = [$(seq -s, 0 99)]
EOF
for format in table json shell; do
  read -r s _ _ < <(measure "$bin" plan "$work/big.toml" --format "$format")
  printf "plan --format %-5s: %.3f s (target < 1 s)\n" "$format" "$s"
done
