#!/usr/bin/env bash
# JSON output reading (DESIGN 5): the output check's throughput and the report's peak memory over
# one large valid output. Prints figures; never asserts timings.
# Usage: benches/json_output.sh [megabytes=490]
set -euo pipefail
cd "$(dirname "$0")/.."
mb=${1:-490}
cargo build --release --quiet
bin=$PWD/target/release/hwr-exp
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# A retention-schema output of about $mb MB: one baseline sample, then loop samples.
python3 - "$work/big.json" "$mb" <<'PY'
import sys
path, mb = sys.argv[1], int(sys.argv[2])
sample = ('{{"phase": "{p}", "iterations": {i}, "loop_seconds": 0.125, "rss_bytes": {r}, '
          '"private_bytes": {v}, "anonymous_bytes": {a}, "fd_count": 4, "note": "caf\u00e9 \\"x\\""}}')
with open(path, "w", encoding="utf-8") as f:
    f.write('{"schema_version": 1, "arguments": {"mode": "get_tensor", "tensor_elements": 64}, "samples": [')
    f.write(sample.format(p="baseline", i=0, r=2000000, v=1000000, a=500000))
    written, i, chunk = 0, 0, []
    while written < mb * 1000000:
        i += 1
        s = "," + sample.format(p="loop", i=i * 50, r=2000000 + i, v=1000000 + i * 4, a=500000 + i * 4)
        chunk.append(s)
        written += len(s)
        if len(chunk) == 10000:
            f.write("".join(chunk))
            chunk = []
    f.write("".join(chunk))
    f.write('], "completed": true, "last_tensor_alive": false}\n')
PY
size=$(stat -c %s "$work/big.json")
echo "output: $((size / 1000000)) MB"

# The output check alone, through the library (release build of the bench).
cargo bench --quiet --bench json_output -- "$work/big.json"

# measure CMD...: "<wall seconds> <peak RSS KiB>" of the command (getrusage of children: VmHWM).
measure() {
  python3 - "$@" <<'PY'
import resource, subprocess, sys, time
t = time.perf_counter()
subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)
wall = time.perf_counter() - t
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"{wall:.2f} {ru.ru_maxrss}")
PY
}

# A bundle with that output as its one run's stdout, then the report over it.
cat > "$work/big.toml" <<TOML
format = 1
[experiment]
name = "big"
[command]
argv = ["cat", "$work/big.json"]
[report]
metrics = { mode = "/arguments/mode", last = "/samples/1/private_bytes" }
TOML
"$bin" run "$work/big.toml" --results-dir "$work/results" --quiet > "$work/bundle"
bundle=$(tail -1 "$work/bundle")
read -r wall kib < <(measure "$bin" report "$bundle" --format csv)
echo "report over one $((size / 1000000)) MB output: ${wall} s, peak RSS $((kib / 1024)) MiB (target <= 64 MB)"
read -r wall kib < <(measure "$bin" report "$bundle" --format csv --plot "$work/plot.svg")
echo "report --plot over the same output: ${wall} s, peak RSS $((kib / 1024)) MiB"
