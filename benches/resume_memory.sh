#!/usr/bin/env bash
# `resume` of a 1,000,000-run bundle (issue 37 item 11): peak RSS beside the target (128 MiB).
# A 1,000,000-run plan (6 matrix keys x 10 values, argv ["true"], sampling off) runs for
# RUN_SECONDS seconds and is interrupted (SIGINT); then `hwr-exp resume` runs over it, ROUNDS
# times, each stopped with SIGINT once it has recorded one more run (so the whole preparation,
# the listing of runs/ and the plan streamed, is measured). Peak RSS from wait4. Prints
# min / median / max; never asserts. The bundle goes to BENCH_DIR (default /dev/shm, a tmpfs:
# plan.json alone is about 440 MB) and is deleted at the end.
# Usage: ROUNDS=3 RUN_SECONDS=5 benches/resume_memory.sh   (HWR_EXP=/path/to/hwr-exp skips the
# build; OLD_HWR_EXP=/path/to/another/hwr-exp measures that binary's resume too, side by side)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-3}
run_seconds=${RUN_SECONDS:-5}
if [ -z "${HWR_EXP:-}" ]; then
  cargo build --release --quiet
  HWR_EXP=$PWD/target/release/hwr-exp
fi
base=${BENCH_DIR:-/dev/shm}
work=$(mktemp -d "$base/hwr-resume-memory.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
git init -q -b main repo
cd repo
{
  printf 'format = 1\n[experiment]\nname = "million"\n[command]\nargv = ["true"]\noutput-format = "text"\n'
  printf '[measure]\nsample-interval = "off"\n[matrix]\n'
  for k in a b c d e f; do echo "$k = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]"; done
} > million.toml
echo results/ > .gitignore
git add .gitignore million.toml
git -c user.email=b@b -c user.name=b commit -q -m manifest

python3 - "$HWR_EXP" "${OLD_HWR_EXP:-}" "$rounds" "$run_seconds" <<'PY'
import glob, os, signal, statistics, subprocess, sys, time

hwr, old, rounds, run_seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
TARGET_MIB = 128

p = subprocess.Popen([hwr, "run", "million.toml", "--quiet", "--results-dir", "results"],
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
while not glob.glob("results/million/*/runs/*/run.json"):
    time.sleep(0.01)
time.sleep(run_seconds)
p.send_signal(signal.SIGINT)
p.wait()
bundle = glob.glob("results/million/*")[0]
done = len(glob.glob(bundle + "/runs/*/run.json"))
print(f"bundle: 1,000,000 planned, {done} run, plan.json {os.path.getsize(bundle + '/plan.json') / 1e6:.0f} MB")

def resume(binary):
    """(wall s, peak RSS MiB, exit code) of `resume`, stopped once it recorded one more run."""
    before = len(glob.glob(bundle + "/runs/*/run.json"))
    t = time.perf_counter()
    p = subprocess.Popen([binary, "resume", bundle, "--quiet"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    while p.poll() is None and len(glob.glob(bundle + "/runs/*/run.json")) <= before:
        time.sleep(0.05)
    if p.poll() is None:
        p.send_signal(signal.SIGINT)
    _, status, usage = os.wait4(p.pid, 0)
    return time.perf_counter() - t, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)

for label, binary in [("resume", hwr)] + ([("resume (OLD_HWR_EXP)", old)] if old else []):
    rss, walls = [], []
    for _ in range(rounds):
        w, r, code = resume(binary)
        if code not in (0, 130):
            print(f"{label}: exit {code}")
        rss.append(r)
        walls.append(w)
    v = sorted(rss)
    print(f"{label + ': peak RSS':<28} min {v[0]:.0f} / median {statistics.median(v):.0f} / max {v[-1]:.0f} MiB"
          f"   target <= {TARGET_MIB} MiB   median/target {statistics.median(v) / TARGET_MIB:.2f}")
    print(f"{label + ': wall':<28} median {statistics.median(walls):.2f} s")
PY
