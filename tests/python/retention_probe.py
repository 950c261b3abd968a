#!/usr/bin/env python3
"""Safetensors memory-retention probe in Python (safetensors + numpy, no torch).

The Python twin of `hwr-exp probe safetensors-retention`: same flags, same phases, same JSON keys,
so that an hwr-exp manifest can point at an external script (experiments/python-diagnostic.toml)
and the results read the same way.

    python3 retention_probe.py --mode get_tensor --tensor-elements 64 \
        --iterations 100000 --sample-every 20000 --warmup 1000

It writes the float32 tensor `weight` = 0..N with `safetensors.numpy.save_file` into a temporary
directory, opens it with `safe_open(..., framework="np")` (the reader) and maps it with `mmap`,
checks the first read equals 0..N, warms up, then loops:

- get_tensor: `reader.get_tensor("weight")`, a new owned numpy array each iteration;
- view: with the safetensors header parsed from the mapping once, take `numpy.frombuffer` of the mapped
  bytes (a borrowed view, no copy);
- reuse: read the one cached owned copy from the first read (the control).

Samples (`before_file`, `baseline`, `loop` every --sample-every iterations, `closed` after the
reader, mapping, views and copies are dropped) come from /proc/self/smaps_rollup (or the file named
by HWR_PROBE_SMAPS_PATH, for tests) and /proc/self/fd. Fields the kernel does not print are left
out, never written as 0. One JSON document goes to stdout. On SIGTERM/SIGINT it prints what it has
with "completed": false and exits 128 + signal number. Unreadable smaps_rollup or a bad flag:
a message on stderr and exit 2. It never trims the allocator or collects garbage on purpose.
"""

import argparse
import json
import mmap
import os
import platform
import signal
import struct
import sys
import tempfile
import time

SCHEMA_VERSION = 1
PROBE_VERSION = "python-1"
TENSOR_NAME = "weight"
STOP_CHECK_EVERY = 1024
KB = 1024

# smaps_rollup field -> sample key. Rss, Private_* and Anonymous are required.
OPTIONAL_FIELDS = {"Pss": "pss_bytes", "Pss_Anon": "pss_anon_bytes", "Swap": "swap_bytes"}

stop_signal = 0


def on_signal(signum, _frame):
    """Only records the signal; the loop checks it every STOP_CHECK_EVERY iterations."""
    global stop_signal
    stop_signal = signum


def positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got `{text}`")
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer (1 or more), got {value}")
    return value


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", required=True, choices=["get_tensor", "view", "reuse"])
    p.add_argument("--tensor-elements", type=positive_int, default=64, metavar="N")
    p.add_argument("--iterations", type=positive_int, default=1_000_000, metavar="N")
    p.add_argument("--sample-every", type=positive_int, default=100_000, metavar="N")
    p.add_argument("--warmup", type=positive_int, default=1000, metavar="N")
    return p.parse_args(argv)


class SmapsError(Exception):
    pass


def read_rollup(path):
    """Parses smaps_rollup text by key: {field: bytes}. Header and unknown lines are tolerated."""
    try:
        with open(path, "r", encoding="ascii", errors="replace") as f:
            text = f.read()
    except OSError as e:
        raise SmapsError(f"cannot read {path}: {e.strerror or e}") from None
    fields = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        parts = rest.split()
        if sep and len(parts) == 2 and parts[1] == "kB" and parts[0].isdigit():
            fields[key.strip()] = int(parts[0]) * KB
    return fields


def fd_count():
    """Open fds, not counting the one os.listdir opens to list /proc/self/fd."""
    return len(os.listdir("/proc/self/fd")) - 1


def take_sample(smaps_path, phase, iterations, loop_seconds):
    fields = read_rollup(smaps_path)
    try:
        sample = {
            "phase": phase,
            "iterations": iterations,
            "loop_seconds": loop_seconds,
            "rss_bytes": fields["Rss"],
            "private_bytes": fields["Private_Clean"] + fields["Private_Dirty"],
            "anonymous_bytes": fields["Anonymous"],
        }
    except KeyError as e:
        raise SmapsError(f"{smaps_path} has no {e.args[0]} line; is it a smaps_rollup file?")
    for field, key in OPTIONAL_FIELDS.items():
        if field in fields:
            sample[key] = fields[field]
    sample["fd_count"] = fd_count()
    return sample


def glibc_version():
    lib, version = platform.libc_ver()
    return version if lib == "glibc" and version else None


class Workload:
    """One mode's iterations. Iteration k (warm-up and loop together, from 0) reads element
    k mod N of the tensor it materialized, viewed or cached and adds it, as an integer, to the
    checksum (the same checksum as the Rust probe)."""

    def __init__(self, mode, reader, mapping, elements, first_read):
        self.mode = mode
        self.reader = reader
        self.mapping = mapping
        self.elements = elements
        self.cached = first_read if mode == "reuse" else None
        self.index = 0
        self.checksum = 0

    def run(self, count):
        n = self.elements
        index = self.index
        total = self.checksum
        if self.mode == "get_tensor":
            get_tensor = self.reader.get_tensor
            tensor = None
            for _ in range(count):
                tensor = get_tensor(TENSOR_NAME)
                total += int(tensor[index])
                index = index + 1 if index + 1 < n else 0
            del tensor
        elif self.mode == "view":
            import numpy as np

            mm = self.mapping
            view = None
            # The header is parsed once, as the reader does; each iteration takes a borrowed view.
            (header_len,) = struct.unpack_from("<Q", mm, 0)
            header = json.loads(mm[8 : 8 + header_len])
            start, _end = header[TENSOR_NAME]["data_offsets"]
            for _ in range(count):
                view = np.frombuffer(mm, dtype="<f4", count=n, offset=8 + header_len + start)
                total += int(view[index])
                index = index + 1 if index + 1 < n else 0
            del view
        else:
            cached = self.cached
            for _ in range(count):
                total += int(cached[index])
                index = index + 1 if index + 1 < n else 0
        self.index = index
        self.checksum = total

    def run_until(self, count):
        """Runs up to `count` iterations, stopping early on a signal; returns how many ran."""
        done = 0
        while done < count and not stop_signal:
            step = min(STOP_CHECK_EVERY, count - done)
            self.run(step)
            done += step
        return done


def main(argv):
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    args = parse_args(argv)
    import numpy as np
    import safetensors
    from safetensors import safe_open
    from safetensors.numpy import save_file

    smaps_path = os.environ.get("HWR_PROBE_SMAPS_PATH") or "/proc/self/smaps_rollup"
    n = args.tensor_elements
    uname = os.uname()
    report = {
        "schema_version": SCHEMA_VERSION,
        "probe": "safetensors-retention",
        "arguments": {
            "mode": args.mode,
            "tensor_elements": n,
            "iterations": args.iterations,
            "sample_every": args.sample_every,
            "warmup": args.warmup,
        },
        "kernel": uname.release,
        "hostname": uname.nodename,
        "pid": os.getpid(),
        "cpu_affinity": sorted(os.sched_getaffinity(0)),
        "probe_version": PROBE_VERSION,
        "safetensors_version": safetensors.__version__,
        "numpy_version": np.__version__,
        "python_version": platform.python_version(),
        "allocator": os.environ.get("PYTHONMALLOC") or "pymalloc (default)",
        "file_bytes": 0,
        "first_read_ok": False,
        "preparation_seconds": 0.0,
        "warmup_seconds": 0.0,
        "samples": [],
        "iterations_completed": 0,
        "checksum": 0,
        "last_tensor_alive": False,
        "completed": False,
    }
    glibc = glibc_version()
    if glibc:
        report["glibc_version"] = glibc

    def finish(code):
        if stop_signal:
            report["stopped_by"] = signal.Signals(stop_signal).name
            code = 128 + stop_signal
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
        sys.stdout.flush()
        return code

    samples = report["samples"]
    try:
        samples.append(take_sample(smaps_path, "before_file", 0, 0.0))
    except SmapsError as e:
        print(f"retention_probe.py: error: {e}", file=sys.stderr)
        return 2

    with tempfile.TemporaryDirectory(prefix="hwr-exp-pyprobe-") as tmp:
        started = time.perf_counter()
        path = os.path.join(tmp, "weight.safetensors")
        save_file({TENSOR_NAME: np.arange(n, dtype=np.float32)}, path)
        report["file_bytes"] = os.path.getsize(path)
        reader = safe_open(path, framework="np")
        file = open(path, "rb")
        mapping = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
        first_read = reader.get_tensor(TENSOR_NAME)
        report["first_read_ok"] = bool(
            first_read.dtype == np.float32
            and first_read.shape == (n,)
            and np.array_equal(first_read, np.arange(n, dtype=np.float32))
        )
        report["preparation_seconds"] = time.perf_counter() - started
        workload = Workload(args.mode, reader, mapping, n, first_read)
        del first_read
        if stop_signal:
            return finish(1)

        started = time.perf_counter()
        workload.run_until(args.warmup)
        report["warmup_seconds"] = time.perf_counter() - started
        report["checksum"] = workload.checksum
        if stop_signal:
            return finish(1)
        try:
            samples.append(take_sample(smaps_path, "baseline", 0, 0.0))
            done = 0
            loop_seconds = 0.0
            while done < args.iterations:
                next_sample = (done // args.sample_every + 1) * args.sample_every
                chunk = min(next_sample, args.iterations) - done
                started = time.perf_counter()
                ran = workload.run_until(chunk)
                loop_seconds += time.perf_counter() - started
                done += ran
                report["iterations_completed"] = done
                report["checksum"] = workload.checksum
                if stop_signal:
                    return finish(1)
                samples.append(take_sample(smaps_path, "loop", done, loop_seconds))

            # Drop every copy and view, then the reader and the mapping.
            report["checksum"] = workload.checksum
            del workload
            del reader
            mapping.close()
            file.close()
            samples.append(take_sample(smaps_path, "closed", done, loop_seconds))
        except SmapsError as e:
            print(f"retention_probe.py: error: {e}", file=sys.stderr)
            return 2
    report["completed"] = True
    ok = report["first_read_ok"]
    if not ok:
        print(f"retention_probe.py: the first read of `{TENSOR_NAME}` was not 0..{n}", file=sys.stderr)
    return finish(0 if ok else 1)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
