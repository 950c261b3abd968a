#!/usr/bin/env bash
# Plan-expansion benchmarks: memory and time of `check` and `plan` on very large matrices and of
# many `exclude` entries. Prints figures (wall seconds, CPU seconds, peak RSS from
# /usr/bin/time -v); never asserts. Usage: benches/plan_scale.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
bin=$PWD/target/release/hwr-exp
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# measure LABEL CMD...: one line "LABEL  wall s  cpu s  peak RSS MiB" (stdout of CMD discarded).
measure() {
  local label=$1
  shift
  /usr/bin/time -v -o "$work/time" "$@" > /dev/null
  awk -v label="$label" '
    /Elapsed \(wall clock\)/ { n = split($NF, p, ":"); wall = (n == 3) ? p[1] * 3600 + p[2] * 60 + p[3] : p[1] * 60 + p[2] }
    /User time/ { cpu += $NF }
    /System time/ { cpu += $NF }
    /Maximum resident set size/ { rss = $NF / 1024 }
    END { printf "%-44s %7.2f s wall %7.2f s cpu %8.1f MiB peak RSS\n", label, wall, cpu, rss }' "$work/time"
}

# header NAME: the manifest's fixed part.
header() {
  printf 'format = 1\n[experiment]\nname = "%s"\n[command]\nargv = ["true", "{k0}"]\n' "$1"
}

# 14 keys x 3 values: 3^14 = 4,782,969 runs.
{
  header k14
  echo "[matrix]"
  for k in $(seq 0 13); do echo "k$k = [1.0, \"b\", 3]"; done
} > "$work/k14.toml"
# 7 keys x 10 values: 10,000,000 runs (the cap).
{
  header k7
  echo "[matrix]"
  for k in $(seq 0 6); do echo "k$k = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]"; done
} > "$work/k7.toml"
# The same, shuffled, with an output name that needs the duplicate check (hashes of names).
{
  header k7s
  echo 'output = "{k0}-{k1}-{k2}-{k3}-{k4}-{k5}-{k6}.json"'
  echo "[schedule]"
  echo 'order = "shuffled"'
  echo "[matrix]"
  for k in $(seq 0 6); do echo "k$k = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]"; done
} > "$work/k7s.toml"
# 200 x 200 cells, 20,000 exclude entries naming both keys.
python3 - "$work/exclude.toml" <<'PY'
import sys
with open(sys.argv[1], "w") as f:
    f.write('format = 1\n[experiment]\nname = "ex"\n[command]\nargv = ["true"]\n[matrix]\n')
    f.write("a = [%s]\n" % ", ".join(str(i) for i in range(200)))
    f.write("b = [%s]\n" % ", ".join(str(i) for i in range(200)))
    f.write("exclude = [\n")
    for i in range(20000):
        f.write("  { a = %d, b = %d },\n" % (i % 200, (i * 7) // 200))
    f.write("]\n")
PY

measure "check 3^14 = 4,782,969 runs" "$bin" check "$work/k14.toml"
measure "plan --format json 3^14 runs" "$bin" plan "$work/k14.toml" --format json
measure "check 10^7 runs" "$bin" check "$work/k7.toml"
measure "check 10^7 runs, shuffled, hashed outputs" "$bin" check "$work/k7s.toml"
measure "plan --format shell 10^7 runs" "$bin" plan "$work/k7.toml" --format shell
measure "check 200x200, 20,000 exclude entries" "$bin" check "$work/exclude.toml"
