#!/usr/bin/env bash
# working-tree.patch limits (issue 20 item 5): peak memory of `hwr-exp run` when the working tree
# holds large changes, and the size of the patch it writes. Prints figures (min / median / max
# over ROUNDS runs) and, when BEFORE is given, the same for that binary side by side with the
# ratio; never asserts.
#
# Repository states (each in its own temporary repository, deleted afterwards):
#   tracked-zeros   a committed 3-byte file rewritten as 300 MB of zeros (sparse) + a text change
#   tracked-random  a committed 3-byte file rewritten as 300 MB of random bytes + a text change
#   untracked       40 untracked files of 15 MiB random bytes (600 MiB, past the 64 MiB total)
# Each state is run by the binary with git on PATH (capture method git-cli), without git on PATH
# (after-libgit2: the libgit2 method), and by BEFORE when given.
#
# Two figures per run, both from the kernel:
#   runner   the hwr-exp process's own peak RSS (VmHWM of /proc/PID/status, read every 10 ms
#            until it exits; the runs are `true` and take no time)
#   tree     ru_maxrss of wait4() on hwr-exp (what `/usr/bin/time -v` prints as "Maximum resident
#            set size"): the largest peak of hwr-exp and every process it waited for (git, runs)
#
# Usage: ROUNDS=3 BEFORE=/path/to/old/hwr-exp benches/patch_limit.sh
#        (HWR_EXP=/path/to/hwr-exp skips the build; WORK=/some/dir puts the repositories there,
#        default a temporary folder under /tmp; about 1 GB of disk is used while it runs)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-3}
if [[ -z "${HWR_EXP:-}" ]]; then
  cargo build --release --locked --quiet
  HWR_EXP=$PWD/target/release/hwr-exp
fi
work=$(mktemp -d "${WORK:-/tmp}/hwr-patch-limit.XXXXXX")
trap 'rm -rf "$work"' EXIT
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
export GIT_AUTHOR_NAME=bench GIT_AUTHOR_EMAIL=bench@example.invalid
export GIT_COMMITTER_NAME=bench GIT_COMMITTER_EMAIL=bench@example.invalid
echo "hwr-exp: $HWR_EXP"
[[ -n "${BEFORE:-}" ]] && echo "before:  $BEFORE"
echo "work: $work ($(df -h --output=fstype "$work" | tail -1 | tr -d ' '))"

python3 - "$work" "$rounds" "$HWR_EXP" "${BEFORE:-}" <<'PY'
import os, statistics, subprocess, sys, time, glob, shutil

work, rounds, new, old = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
MIB = 1024 * 1024

def git(repo, *args):
    subprocess.run(["git", "-C", repo, *args], check=True, stdout=subprocess.DEVNULL)

def random_file(path, size):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(left, 8 * MIB)
            f.write(os.urandom(n))
            left -= n

MANIFEST = ('format = 1\n[experiment]\nname = "big"\n[command]\nargv = ["/bin/true"]\n'
            'output-format = "text"\n[measure]\nsample-interval = "off"\n')

def make(name):
    repo = os.path.join(work, name)
    os.makedirs(repo)
    git(repo, "init", "-q", "-b", "main")
    with open(f"{repo}/experiment.toml", "w") as f:
        f.write(MANIFEST)
    with open(f"{repo}/.gitignore", "w") as f:
        f.write("results/\n")
    with open(f"{repo}/src.txt", "w") as f:
        f.write("old\n")
    if name.startswith("tracked"):
        with open(f"{repo}/model.bin", "w") as f:
            f.write("v1\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "init")
    with open(f"{repo}/src.txt", "w") as f:
        f.write("new\n")
    if name == "tracked-zeros":
        with open(f"{repo}/model.bin", "wb") as f:
            f.truncate(300 * 1000 * 1000)
    elif name == "tracked-random":
        random_file(f"{repo}/model.bin", 300 * 1000 * 1000)
    else:
        for i in range(40):
            random_file(f"{repo}/shards/{i:02d}.bin", 15 * MIB)
    return repo

def vmhwm(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None

NO_GIT = os.path.join(work, "no-git-bin")
os.makedirs(NO_GIT)

def one(binary, repo, libgit2):
    shutil.rmtree(f"{repo}/results", ignore_errors=True)
    env = dict(os.environ)
    if libgit2:
        env["PATH"] = NO_GIT  # no git on PATH: the libgit2 capture method
    t0 = time.monotonic()
    p = subprocess.Popen([binary, "run", "experiment.toml", "--quiet", "--results-dir", "results"],
                         cwd=repo, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    own = 0
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        h = vmhwm(p.pid)
        if h:
            own = max(own, h)
        time.sleep(0.01)
    wall = time.monotonic() - t0
    patch = glob.glob(f"{repo}/results/big/*/working-tree.patch")
    size = os.path.getsize(patch[0]) if patch else -1
    return own, ru.ru_maxrss * 1024, size, wall

def mmm(xs):
    return f"{min(xs)/MIB:7.1f} / {statistics.median(xs)/MIB:7.1f} / {max(xs)/MIB:7.1f}"

binaries = [("after", new, False), ("after-libgit2", new, True)] + ([("before", old, False)] if old else [])
print(f"{'state':15} {'binary':13} {'runner MiB (min/med/max)':>27} {'tree MiB (min/med/max)':>27} {'patch MiB':>10} {'wall s':>7}")
for name in ["tracked-zeros", "tracked-random", "untracked"]:
    repo = make(name)
    res = {label: [] for label, _, _ in binaries}
    for _ in range(rounds):
        for label, binary, lib in binaries:  # alternated
            res[label].append(one(binary, repo, lib))
    for label, _, _ in binaries:
        r = res[label]
        print(f"{name:15} {label:13} {mmm([x[0] for x in r]):>27} {mmm([x[1] for x in r]):>27} "
              f"{statistics.median([x[2] for x in r])/MIB:10.2f} {statistics.median([x[3] for x in r]):7.2f}")
    if old:
        a = statistics.median([x[0] for x in res["after"]])
        b = statistics.median([x[0] for x in res["before"]])
        ta = statistics.median([x[1] for x in res["after"]])
        tb = statistics.median([x[1] for x in res["before"]])
        print(f"{name:15} ratio after/before: runner {a/b:.3f}, tree {ta/tb:.3f}")
    shutil.rmtree(repo)
PY
