#!/usr/bin/env bash
# Cost as work grows (issue 20 item 5): a 1,000,000-run plan (6 matrix keys x 10 values, argv
# ["true"], sampling off) and a bundle of it.
#   - time from `hwr-exp run` to the first run.json, ROUNDS rounds (each round a new bundle,
#     stopped with SIGINT once the first run is recorded, then deleted);
#   - one bundle run for RUN_SECONDS seconds and interrupted: peak RSS and wall time of `report`
#     (csv, table, json), `verify`, `list` and `resume` (stopped with SIGINT once it has recorded
#     a run) over it, ROUNDS rounds each;
#   - the runner's peak RSS with a 300 MB untracked file in the repository (working-tree.patch
#     limit), and the patch's size.
# Prints min / median / max; never asserts. The bundles go to BENCH_DIR (default: a folder on
# /dev/shm, a tmpfs: plan.json alone is about 440 MB) and are deleted at the end.
# Usage: ROUNDS=5 RUN_SECONDS=20 benches/plan_million.sh   (HWR_EXP=/path/to/hwr-exp skips the build;
# ONLY=report measures only `report` of the interrupted bundle)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-5}
run_seconds=${RUN_SECONDS:-20}
if [ -z "${HWR_EXP:-}" ]; then
  cargo build --release --quiet
  HWR_EXP=$PWD/target/release/hwr-exp
fi
base=${BENCH_DIR:-/dev/shm}
work=$(mktemp -d "$base/hwr-plan-million.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "bundles in $work ($(df -h --output=fstype "$work" | tail -1 | tr -d ' '))"
cd "$work"
git init -q -b main repo
cd repo
git -c user.email=b@b -c user.name=b commit -q --allow-empty -m init
{
  printf 'format = 1\n[experiment]\nname = "million"\n[command]\nargv = ["true"]\noutput-format = "text"\n'
  printf '[measure]\nsample-interval = "off"\n[matrix]\n'
  for k in a b c d e f; do echo "$k = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]"; done
} > million.toml
echo results/ > .gitignore
git add .gitignore million.toml
git -c user.email=b@b -c user.name=b commit -q -m manifest

python3 - "$HWR_EXP" "$rounds" "$run_seconds" "${ONLY:-}" <<'PY'
import glob, os, shutil, signal, statistics, subprocess, sys, time

hwr, rounds, run_seconds, only = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]

def first_run(results, stay=0.0):
    """Seconds from the start of `hwr-exp run` to its first run.json; then SIGINT after `stay` s."""
    t = time.perf_counter()
    p = subprocess.Popen([hwr, "run", "million.toml", "--quiet", "--results-dir", results],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first = None
    while first is None and p.poll() is None:
        if glob.glob(results + "/million/*/runs/*/run.json"):
            first = time.perf_counter() - t
        else:
            time.sleep(0.002)
    time.sleep(stay)
    p.send_signal(signal.SIGINT)
    p.wait()
    return first

def line(label, values, unit, fmt="{:.2f}"):
    v = sorted(values)
    print(f"{label:<44} min {fmt.format(v[0])} / median {fmt.format(statistics.median(v))} / max {fmt.format(v[-1])} {unit}")

firsts = []
for i in range(0 if only else rounds):
    results = f"first-{i}"
    firsts.append(first_run(results))
    shutil.rmtree(results)
if firsts:
    line("run: time to the first run.json", firsts, "s", "{:.3f}")

first_run("results", stay=run_seconds)
bundle = glob.glob("results/million/*")[0]
done = len(glob.glob(bundle + "/runs/*/run.json"))
size = os.path.getsize(bundle + "/plan.json")
print(f"bundle: 1,000,000 planned, {done} run, plan.json {size / 1e6:.0f} MB")

def timed(args, stop_after_new_run=False):
    """(wall s, peak RSS MiB) of `hwr-exp ARGS` from wait4."""
    t = time.perf_counter()
    p = subprocess.Popen([hwr] + args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if stop_after_new_run:
        before = len(glob.glob(bundle + "/runs/*/run.json"))
        while p.poll() is None and len(glob.glob(bundle + "/runs/*/run.json")) <= before:
            time.sleep(0.05)
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
    _, _, usage = os.wait4(p.pid, 0)
    return time.perf_counter() - t, usage.ru_maxrss / 1024

for label, args, stop in [
    ("report --format csv", ["report", bundle, "--format", "csv"], False),
    ("report (table)", ["report", bundle], False),
    ("report --format json", ["report", bundle, "--format", "json"], False),
    ("verify", ["verify", bundle], False),
    ("list", ["list", "results"], False),
    ("resume (until one more run is recorded)", ["resume", bundle, "--quiet"], True),
]:
    if only and not label.startswith(only):
        continue
    walls, rss = [], []
    for _ in range(rounds):
        w, r = timed(args, stop)
        walls.append(w)
        rss.append(r)
    line(label + ": peak RSS", rss, "MiB", "{:.0f}")
    line(label + ": wall", walls, "s")
shutil.rmtree("results")
PY
[ -n "${ONLY:-}" ] && exit 0

# The runner with a 300 MB untracked file (sparse: instant, no disk used) and five 15 MiB ones
# (the 64 MiB total): peak RSS of `hwr-exp run` and the size of working-tree.patch.
mkdir -p data shards
truncate -s 300M data/huge.bin
for i in 0 1 2 3 4; do truncate -s 15M "shards/$i.bin"; done
printf 'format = 1\n[experiment]\nname = "big"\n[command]\nargv = ["true"]\noutput-format = "text"\n' > big.toml
for ((i = 0; i < rounds; i++)); do
  /usr/bin/time -f "%M" -o "$work/rss" "$HWR_EXP" run big.toml --quiet --results-dir results > /dev/null 2>&1 || true
  cat "$work/rss"
done | sort -n | awk '{ v[NR] = $1 } END { printf "%-44s min %.0f / median %.0f / max %.0f MiB\n", "run, 300 MB untracked file: runner peak RSS", v[1] / 1024, v[int((NR + 1) / 2)] / 1024, v[NR] / 1024 }'
echo "working-tree.patch: $(stat -c %s results/big/*/working-tree.patch | head -1) bytes"
