#!/usr/bin/env bash
# `check` of a 3^14 = 4,782,969-run matrix (issue 37 item 11): the too-few-runs and contrast
# warnings are counted from the matrix's structure, not by walking its runs. Prints wall seconds
# and peak RSS of this tree's binary beside the target (a few seconds, 5 MB above a small
# manifest's check) and, given OLD (a binary built before the change, e.g. main's), the old
# binary's figures and the ratio. Never asserts.
# Usage: benches/check_scale.sh [OLD_BINARY]   (KEYS=12 for a smaller matrix; BIN=path to skip
# the release build)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${BIN:-}" ]; then
  cargo build --release --quiet
  BIN=$PWD/target/release/hwr-exp
fi
old=${1:-}
keys=${KEYS:-14}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# measure BIN MANIFEST: "wall_seconds peak_rss_kib" of `BIN check MANIFEST`.
measure() {
  /usr/bin/time -f '%e %M' -o "$work/time" "$1" check "$2" > /dev/null 2> "$work/stderr" || true
  tail -n 1 "$work/time"
}

# mode (get, view, reuse: the control) and keys-1 more axes of 3 values: 3^keys cells, one run each.
{
  printf 'format = 1\n[experiment]\nname = "k%s"\n[command]\nargv = ["true", "{mode}"]\n[matrix]\n' "$keys"
  echo 'mode = ["get", "view", "reuse"]'
  for k in $(seq 1 $((keys - 1))); do echo "k$k = [1.0, \"b\", 3]"; done
} > "$work/big.toml"
printf 'format = 1\n[experiment]\nname = "small"\n[command]\nargv = ["true"]\n' > "$work/small.toml"

read -r small_wall small_rss < <(measure "$BIN" "$work/small.toml")
read -r new_wall new_rss < <(measure "$BIN" "$work/big.toml")
printf '%-34s %8s %12s\n' "check, 3^$keys runs" "wall s" "peak RSS MiB"
printf '%-34s %8.2f %12.1f\n' "this tree" "$new_wall" "$(echo "$new_rss / 1024" | bc -l)"
printf '%-34s %8s %12.1f\n' "target (few s; small check + 5 MB)" "~3" "$(echo "$small_rss / 1024 + 5" | bc -l)"
if [ -n "$old" ]; then
  read -r old_wall old_rss < <(measure "$old" "$work/big.toml")
  printf '%-34s %8.2f %12.1f\n' "old binary" "$old_wall" "$(echo "$old_rss / 1024" | bc -l)"
  printf '%-34s %8.1fx %11.1fx\n' "old / this tree" "$(echo "$old_wall / $new_wall" | bc -l)" "$(echo "$old_rss / $new_rss" | bc -l)"
fi
grep -h warning "$work/stderr" | head -n 2 || true
