#!/usr/bin/env bash
# Provenance capture benchmarks. Prints figures and ratios against git's own commands on the same
# tree; never asserts timings. Usage: benches/provenance_capture.sh [rounds=7]
#
# 1. A 5,000-file repository with 20,000 ignored files in build/, a 1 MB text diff and a 10 MB
#    binary change: hwr-exp's capture against `git status --porcelain` + `git diff HEAD --binary`.
# 2. A clean 100,000-file repository: hwr-exp's capture against `git status --porcelain`.
# Both also time the after-run drift capture (the check that decides `drift`).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-7}
# Build first, so that compiling does not overlap the measurements.
bench=$(cargo bench --bench provenance_capture --no-run --message-format=json 2>/dev/null |
  python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "provenance_capture" and m.get("executable"):
        print(m["executable"])')
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
export GIT_AUTHOR_NAME=bench GIT_AUTHOR_EMAIL=bench@example.invalid
export GIT_COMMITTER_NAME=bench GIT_COMMITTER_EMAIL=bench@example.invalid

echo "== building the repositories in $work"
python3 - "$work" <<'PY'
import os, random, subprocess, sys
work = sys.argv[1]

def git(repo, *args):
    subprocess.run(["git", "-C", repo, *args], check=True, stdout=subprocess.DEVNULL)

def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)

# 1. 5,000 tracked files, 20,000 ignored ones, a 1 MB text diff and a 10 MB binary change.
rng = random.Random(1)
repo = os.path.join(work, "dirty")
os.makedirs(repo)
git(repo, "init", "-q", "-b", "main")
for i in range(4998):
    write(f"{repo}/src/m{i % 50:02d}/f{i:05d}.txt",
          "".join(f"line {j} of file {i}\n" for j in range(20)).encode())
big_old = "".join(f"text line {j:07d} original\n" for j in range(40000)).encode()
write(f"{repo}/big.txt", big_old)
blob = bytearray(rng.randbytes(10 * 1024 * 1024))
write(f"{repo}/blob.bin", bytes(blob))
write(f"{repo}/.gitignore", b"build/\n")
git(repo, "add", "-A")
git(repo, "commit", "-q", "-m", "init")
for i in range(20000):
    write(f"{repo}/build/o{i % 200:03d}/obj{i:05d}.o", f"object {i}\n".encode())
write(f"{repo}/big.txt", "".join(f"text line {j:07d} changed!\n" for j in range(40000)).encode())
for k in range(0, len(blob), 4096):
    blob[k] ^= 0xFF
write(f"{repo}/blob.bin", bytes(blob))

# 2. 100,000 tracked files, clean.
repo = os.path.join(work, "clean100k")
os.makedirs(repo)
git(repo, "init", "-q", "-b", "main")
for i in range(100000):
    write(f"{repo}/d{i % 500:03d}/f{i:06d}.txt", f"file {i}\n".encode())
git(repo, "add", "-A")
git(repo, "commit", "-q", "-m", "init")
PY
# Prime the index's stat data and the page cache, as a user's own `git status` would.
git -C "$work/dirty" status --porcelain >/dev/null
git -C "$work/clean100k" status --porcelain >/dev/null
echo "dirty: $(git -C "$work/dirty" status --porcelain | wc -l) status lines, $(git -C "$work/dirty" diff HEAD --binary | wc -c) bytes of git diff HEAD --binary"

echo "== capture, $rounds rounds each"
"$bench" "$work/dirty" "$rounds"
"$bench" "$work/clean100k" "$rounds" --clean
