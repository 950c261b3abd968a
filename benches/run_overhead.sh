#!/usr/bin/env bash
# Runner overhead benchmarks. Prints figures and ratios against the named baselines;
# never asserts timings. Usage: benches/run_overhead.sh [runs=500]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-500}
cargo build --release --quiet
bin=$PWD/target/release/hwr-exp
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

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

echo "== $runs runs of /bin/true"
read -r loop_s _ loop_cpu < <(measure bash -c "for i in \$(seq $runs); do CUDA_VISIBLE_DEVICES='' timeout 120s taskset -c 0 true; done")
printf "shell loop (CUDA_VISIBLE_DEVICES='' timeout 120s taskset -c 0 true): %.3f s wall (%.2f ms/run), %.3f s CPU\n" "$loop_s" "$(awk "BEGIN{print $loop_s * 1000 / $runs}")" "$loop_cpu"
for interval in 100ms off; do
  manifest "true-$interval" "$runs" "$interval"
  read -r s _ cpu < <(measure "$bin" run "$work/true-$interval.toml" --quiet --results-dir "$work/results")
  printf "hwr-exp run, sample-interval %-5s: %.3f s wall (%.2f ms/run), ratio to the loop %.2fx wall (target <= 0.5x), %.2fx CPU\n" \
    "$interval" "$s" "$(awk "BEGIN{print $s * 1000 / $runs}")" "$(awk "BEGIN{print $s / $loop_s}")" "$(awk "BEGIN{print $cpu / $loop_cpu}")"
done

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
