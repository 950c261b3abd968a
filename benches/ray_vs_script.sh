#!/usr/bin/env bash
# The Ray executor against a hand-written Ray script doing the same (issue 39): N runs (default
# 200) of a trivial command, each in a fresh Ray task process (max_calls=1) on a two-node cluster
# started on this machine (tests/integration/support/ray_cluster.py, 2 CPUs a node). hwr-exp's side:
# `hwr-exp run` with kind = "ray" (driver, one `hwr-exp task` a run: CPU claim, cgroup, sampling,
# run.json). The script's side: the same Ray task that runs the command with subprocess and
# writes its output, nothing else. Prints both walls, the ratio, and the submitting hwr-exp's CPU
# time per run while it waits (user+sys of `hwr-exp run` and its Ray driver, from /usr/bin/time). Never asserts.
# Usage: benches/ray_vs_script.sh [runs=200]   (HWR_EXP=/path/to/hwr-exp skips the release build)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-200}
if [ -z "${HWR_EXP:-}" ]; then
  cargo build --release --quiet
  HWR_EXP=$PWD/target/release/hwr-exp
fi
python3 -c 'import ray' || { echo "needs python3 with ray (python3 -m pip install ray)" >&2; exit 1; }
export RAY_USAGE_STATS_ENABLED=0
work=$(mktemp -d)
mkfifo "$work/ctl"
python3 tests/integration/support/ray_cluster.py < "$work/ctl" > "$work/cluster.out" &
cluster=$!
exec 3> "$work/ctl"
cleanup() { echo quit >&3 || true; exec 3>&-; wait "$cluster" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
until [ -s "$work/cluster.out" ]; do sleep 0.2; done
address=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["address"])' "$work/cluster.out")
echo "cluster at $address, $runs runs, binary $HWR_EXP"

mkdir -p "$work/repo" && cd "$work/repo"
cat > bench.toml <<TOML
format = 1
[experiment]
name = "ray-bench"
[command]
shell = "echo '{{\"r\": {repetition}}}' > {run-dir}/out-{repetition}.json"
output = "out-{repetition}.json"
[schedule]
repetitions = $runs
jobs = $runs
[executor]
kind = "ray"
address = "$address"
TOML

cat > script.py <<'PY'
import os, subprocess, sys, time
address, runs, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
if address.startswith("127."):
    # As hwr-exp's driver: keep Ray from replacing a loopback address (set before the import).
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
import ray
ray.init(address=address, logging_level="ERROR", log_to_driver=False)

@ray.remote(max_calls=1, max_retries=0, num_cpus=1)
def one(i):
    path = os.path.join(out, f"out-{i}.json")
    subprocess.run(["/bin/sh", "-c", f"echo '{{\"r\": {i}}}' > {path}"], check=True)
    return i

start = time.monotonic()
ray.get([one.remote(i) for i in range(runs)])
print(f"{time.monotonic() - start:.2f}")
PY
mkdir -p out
# Warm the cluster (worker start-up paths, imports) once for both sides alike.
python3 script.py "$address" 8 "$PWD/out" > /dev/null

t0=$(date +%s.%N)
/usr/bin/time -f "%U %S" -o time.txt "$HWR_EXP" run bench.toml --quiet > /dev/null
t1=$(date +%s.%N)
hwr=$(python3 -c "print(f'{$t1 - $t0:.2f}')")
read -r user sys < time.txt

t0=$(date +%s.%N)
python3 script.py "$address" "$runs" "$PWD/out" > /dev/null
t1=$(date +%s.%N)
script=$(python3 -c "print(f'{$t1 - $t0:.2f}')")

python3 - "$hwr" "$script" "$user" "$sys" "$runs" <<'PY'
import sys
hwr, script, user, sys_, runs = map(float, sys.argv[1:])
print(f"hwr-exp run (kind = \"ray\"): {hwr:.2f} s wall for {runs:.0f} runs")
print(f"hand-written Ray script:    {script:.2f} s wall")
print(f"ratio hwr-exp / script:     {hwr / script:.2f}x")
print(f"submitting hwr-exp CPU:     {(user + sys_) * 1000 / runs:.2f} ms per run (user {user:.2f} s, sys {sys_:.2f} s)")
PY
