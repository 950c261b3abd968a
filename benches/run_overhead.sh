#!/usr/bin/env bash
# Runner overhead benchmarks. Prints figures and ratios against the named baselines (the seed's
# shell loop, `hyperfine -N`); never asserts timings.
# Usage: benches/run_overhead.sh [runs=500] [rounds=5]
#
# The results go to two file systems in turn, each named in the output: a fresh ext4 made for the
# benchmark (a 2 GiB image file on a loop device, `mkfs.ext4`, mounted) and a fresh tmpfs mount.
# Both need root; without it, or with HWR_BENCH_FS=tmpdir, the results go to a `mktemp -d` folder
# (TMPDIR chooses) and the script says which file system that is. A fresh ext4 matters: ext4
# makes new files slowly for a while after many were deleted (its inode allocator steps over
# recently freed inodes), and hwr-exp makes files per run where the loop and hyperfine make none.
# HWR_BENCH_FS=ext4 or =tmpfs measures only that one.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-500}
rounds=${2:-5}
cargo build --release --quiet
bin=$PWD/target/release/hwr-exp
work=$(mktemp -d)
mounts=()
cleanup() {
  for m in "${mounts[@]}"; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

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

has_hyperfine=1
command -v hyperfine >/dev/null || { has_hyperfine=0; echo "hyperfine not found (apt-get install -y hyperfine): its column is skipped"; }

# fs_name DIR: "<type> on <source>" of the file system holding DIR.
fs_name() { df -T "$1" | awk 'NR==2 {print $2 " on " $1}'; }

# rounds_on DIR: the side-by-side rounds with the bundles written below DIR. In rounds (the
# machine's load changes between rounds; ratios within a round are fairer than figures across
# rounds): the seed's shell loop, `hyperfine -N` of /bin/true, and hwr-exp with its default
# containment (a per-run cgroup where one can be made) and with the process-tree fallback
# forced, each with memory sampling at 100ms and off.
rounds_on() {
  local results=$1
  echo "== $runs runs of /bin/true, $rounds rounds side by side; results on $(fs_name "$results") ($results)"
  local containment
  containment=$(HWR_CONTAINMENT= "$bin" run "$work/probe.toml" --quiet --results-dir "$results/probe" >/dev/null 2>&1;
    python3 -c 'import json,glob,sys; print(json.load(open(glob.glob(sys.argv[1] + "/*/*/runs/*/run.json")[0])).get("containment", "?"))' "$results/probe")
  echo "default containment here: $containment"
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
        read -r s _ cpu < <(HWR_CONTAINMENT=$mode measure "$bin" run "$work/true-$interval.toml" --quiet --results-dir "$results/results")
        printf "hwr-exp %s %s\t%s\t%s\n" "$mode" "$interval" "$(awk "BEGIN{print $s * 1000 / $runs}")" "$cpu" >> "$work/rounds.tsv"
      done
    done
    echo "round $round done (load $(cut -d' ' -f1 /proc/loadavg))"
  done
  python3 - "$work/rounds.tsv" "$(fs_name "$results" | cut -d' ' -f1)" <<'PY2'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
fs = sys.argv[2]
target = {"ext4": 1.0, "tmpfs": 0.5}.get(fs)
by = {}
for name, ms, cpu in rows:
    by.setdefault(name, []).append((float(ms), None if cpu == "-" else float(cpu)))
def mmm(xs):
    xs = sorted(xs)
    return f"min {xs[0]:.2f} / median {statistics.median(xs):.2f} / max {xs[-1]:.2f}"
for name in ["loop", "hyperfine"]:
    if name in by:
        print(f"{name:28} ms/run: {mmm([m for m, _ in by[name]])}")
note = f"target on {fs} <= {target}x" if target else "targets: <= 1.0x on ext4, <= 0.5x on tmpfs"
for name, vals in by.items():
    if not name.startswith("hwr-exp"):
        continue
    print(f"{name:28} ms/run: {mmm([m for m, _ in vals])}")
    loop = by["loop"]
    print(f"{'':28} / loop ({note}; target: <= 0.5x, docs/benchmarks.md): {mmm([m / l[0] for (m, _), l in zip(vals, loop)])}")
    print(f"{'':28} / loop, CPU seconds: {mmm([c / l[1] for (_, c), l in zip(vals, loop)])}")
    if "hyperfine" in by:
        hf = by["hyperfine"]
        print(f"{'':28} / hyperfine (target <= 2x): {mmm([m / h[0] for (m, _), h in zip(vals, hf)])}")
PY2
}

# The file systems: a fresh ext4 on a loop device and a fresh tmpfs (root), else TMPDIR's.
want=${HWR_BENCH_FS:-both}
if [ "$(id -u)" != 0 ] && [ "$want" != tmpdir ]; then
  echo "not root: no fresh ext4 or tmpfs can be mounted; results go to $work (HWR_BENCH_FS=tmpdir)"
  want=tmpdir
fi
if [ "$want" = both ] || [ "$want" = ext4 ]; then
  command -v mkfs.ext4 >/dev/null || { echo "mkfs.ext4 not found (apt-get install -y e2fsprogs)"; exit 3; }
  mkdir -p "$work/ext4"
  truncate -s 2G "$work/ext4.img"
  mkfs.ext4 -q -F "$work/ext4.img"
  mount -o loop "$work/ext4.img" "$work/ext4"
  mounts+=("$work/ext4")
  echo "fresh ext4: $(losetup -j "$work/ext4.img" | cut -d: -f1) backed by $work/ext4.img on $(fs_name "$work")"
  rounds_on "$work/ext4"
  fs_dir=$work/ext4
fi
if [ "$want" = both ] || [ "$want" = tmpfs ]; then
  mkdir -p "$work/tmpfs"
  mount -t tmpfs -o size=2G tmpfs "$work/tmpfs"
  mounts+=("$work/tmpfs")
  rounds_on "$work/tmpfs"
  fs_dir=${fs_dir:-$work/tmpfs}
fi
if [ "$want" = tmpdir ]; then
  mkdir -p "$work/results"
  rounds_on "$work/results"
  fs_dir=$work/results
fi

# HWR_BENCH_ROUNDS_ONLY=1: only the rounds above.
[ "${HWR_BENCH_ROUNDS_ONLY:-0}" = 1 ] && exit 0

echo "== runner peak RSS, 100 vs 10000 runs (sample-interval off)"
manifest rss-100 100 off
manifest rss-10000 10000 off
read -r _ rss100 _ < <(measure "$bin" run "$work/rss-100.toml" --quiet --results-dir "$fs_dir/rss")
read -r s10k rss10k _ < <(measure "$bin" run "$work/rss-10000.toml" --quiet --results-dir "$fs_dir/rss")
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
