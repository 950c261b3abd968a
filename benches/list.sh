#!/usr/bin/env bash
# `hwr-exp list` over many bundles (target: 1,000 bundles in under 1 second).
# Makes one real bundle (3 runs) with `hwr-exp run`, copies it to N bundles in one results folder
# (every 10th marked `running` with a left-over, unlocked `.lock`, so the liveness check, a
# non-blocking flock on it, runs too), then times `hwr-exp list` (table and --format json), best and median of 5, cold cache not
# forced. Prints figures; never asserts timings.
# Usage: benches/list.sh [bundles=1000]   (HWR_EXP=/path/to/hwr-exp skips the release build)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-1000}
if [ -z "${HWR_EXP:-}" ]; then
  cargo build --release --quiet
  HWR_EXP=$PWD/target/release/hwr-exp
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
git init -q -b main . && git -c user.email=b@b -c user.name=b commit -q --allow-empty -m init
cat > list-bench.toml <<'TOML'
format = 1
[experiment]
name = "list-bench"
[command]
shell = "echo '{{\"rep\": {repetition}}}'"
[schedule]
repetitions = 3
TOML
src=$("$HWR_EXP" run list-bench.toml --quiet --results-dir results)
exp=results/list-bench
for ((i = 1; i < n; i++)); do
  dst=$(printf '%s/20260101T%06dZ-%04x' "$exp" "$i" "$i")
  cp -r "$src" "$dst"
  if ((i % 10 == 0)); then
    sed -i -e 's/"status": "complete"/"status": "running"/' -e 's/"runner-pid": [0-9]*/"runner-pid": 4194300/' "$dst/bundle.json"
    echo 4194300 > "$dst/.lock"
  fi
done
echo "bundles: $(find "$exp" -name bundle.json | wc -l), $(du -sh "$exp" | cut -f1) on disk"
"$HWR_EXP" list results > /dev/null # warm the page cache

time_it() { # prints wall seconds of one command
  python3 - "$@" <<'PY'
import subprocess, sys, time
t = time.perf_counter()
subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)
print(f"{time.perf_counter() - t:.3f}")
PY
}
for format in table json; do
  times=$(for _ in 1 2 3 4 5; do time_it "$HWR_EXP" list results --format "$format"; done | sort -n)
  best=$(echo "$times" | head -1)
  median=$(echo "$times" | sed -n 3p)
  echo "hwr-exp list --format $format over $n bundles: best ${best} s, median ${median} s (goal < 1 s)"
done
echo "abandoned rows: $("$HWR_EXP" list results | grep -c abandoned)"
