# The Ray driver of hwr-exp's ray executor (DESIGN 8, docs/ray.md). hwr-exp starts it as
# `python3 -c <this file> SPEC` in a session of its own and reads the JSON lines it appends to
# the spec's `events` file. It connects to an existing cluster and submits one Ray task per
# planned run: a fresh worker process (max_calls=1, no reuse, no retry) that writes
# `ray/started/<index>.json` (its node) and runs `hwr-exp task --index <index> <bundle>` on its
# node, which pins, contains, samples and records the run as on Slurm. SIGTERM (`hwr-exp
# cancel`, Ctrl-C of the waiter) cancels the tasks; their hwr-exp gets SIGTERM and stops its run.
import json
import os
import signal
import sys
import time

SPEC = json.load(open(sys.argv[1]))
EVENTS = open(SPEC["events"], "a", buffering=1)
STOP = []


def emit(**event):
    event["at"] = time.time()
    EVENTS.write(json.dumps(event) + "\n")
    EVENTS.flush()


def on_signal(signum, _frame):
    STOP.append(signum)


signal.signal(signal.SIGTERM, on_signal)
signal.signal(signal.SIGINT, on_signal)

# Ray replaces a loopback address ("127.0.0.1:6379", "localhost:6379") by this machine's outside
# address before it connects, which misses a cluster bound to loopback. Its switch for
# single-machine clusters keeps the loopback address (and names the driver's node 127.0.0.1).
_HOST = SPEC["address"].rsplit(":", 1)[0].strip("[]")
if _HOST in ("localhost", "::1") or _HOST.startswith("127."):
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

try:
    import ray
except ImportError as e:
    emit(event="failed", error=f"cannot import ray in {sys.executable}: {e}")
    sys.exit(3)

try:
    ray.init(
        address=SPEC["address"],
        logging_level="ERROR",
        log_to_driver=False,
        namespace="hwr-exp",
        configure_logging=False,
    )
except Exception as e:  # noqa: BLE001 - any failure to connect is reported as such
    emit(event="failed", error=f"cannot connect to the ray cluster at {SPEC['address']}: {type(e).__name__}: {e}")
    sys.exit(3)

emit(
    event="connected",
    address=SPEC["address"],
    ray_version=ray.__version__,
    nodes=[
        {"node_id": n["NodeID"], "address": n.get("NodeManagerAddress"), "cpus": n.get("Resources", {}).get("CPU")}
        for n in ray.nodes()
        if n.get("Alive")
    ],
)


@ray.remote(max_calls=1, max_retries=0, num_cpus=SPEC["cpus_per_run"])
def run(index, exe, bundle, ray_dir, grace):
    import ctypes
    import socket
    import subprocess

    ctx = ray.get_runtime_context()
    node_id = ctx.get_node_id()
    node = f"{socket.gethostname()}-{node_id[:8]}"
    started = os.path.join(ray_dir, "started", f"{index}.json")
    with open(started + ".tmp", "w") as f:
        json.dump({"node": node, "node_id": node_id, "pid": os.getpid(), "at": time.time()}, f)
    os.replace(started + ".tmp", started)
    env = dict(os.environ, HWR_TASK_NODE=node, HWR_RAY_NODE_ID=node_id, HWR_RAY_TASK_ID=ctx.get_task_id() or "")
    libc = ctypes.CDLL(None, use_errno=True)

    def die_with_worker():
        # PR_SET_PDEATHSIG: SIGTERM when this worker dies (its raylet killed, a forced cancel).
        libc.prctl(1, signal.SIGTERM)

    with open(os.path.join(ray_dir, "logs", f"{index}.err"), "ab") as err:
        proc = subprocess.Popen(
            [exe, "task", "--index", str(index), bundle],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=err,
            stderr=err,
            preexec_fn=die_with_worker,
        )
        try:
            code = proc.wait()
        except BaseException:
            # ray.cancel: stop the run (hwr-exp stops its processes on SIGTERM, SIGKILL after grace).
            proc.terminate()
            try:
                proc.wait(timeout=grace + 10)
            except subprocess.TimeoutExpired:
                proc.kill()
            raise
    return {"node": node, "node_id": node_id, "code": code}


def describe(error):
    text = str(error).strip().splitlines()
    first = next((line.strip() for line in text if line.strip()), "")
    return f"{type(error).__name__}: {first}"[:2000]


def node_of(error):
    """The hwr-exp name of the node Ray's error names (`node ID: <hex>`), or None."""
    import re

    found = re.search(r"node ID: ([0-9a-f]{16,})", str(error))
    if not found:
        return None
    node_id = found.group(1)
    try:
        host = next((n.get("NodeManagerHostname") for n in ray.nodes() if n["NodeID"] == node_id), None)
    except Exception:  # noqa: BLE001 - the name is a courtesy
        host = None
    return f"{host or 'unknown'}-{node_id[:8]}"


pending = list(SPEC["indices"])
pending.reverse()
limit = max(1, int(SPEC["max_in_flight"]))
inflight = {}
emit(event="submitting", runs=len(pending), max_in_flight=limit)
while (pending or inflight) and not STOP:
    while pending and len(inflight) < limit:
        i = pending.pop()
        ref = run.remote(i, SPEC["exe"], SPEC["bundle"], SPEC["ray_dir"], SPEC["grace"])
        inflight[ref] = i
    ready, _ = ray.wait(list(inflight), num_returns=len(inflight), timeout=0.2, fetch_local=False)
    for ref in ready:
        i = inflight.pop(ref)
        try:
            out = ray.get(ref)
            emit(event="end", index=i, ok=True, code=out["code"], node=out["node"])
        except Exception as e:  # noqa: BLE001 - every task failure is reported
            emit(event="end", index=i, ok=False, error=describe(e), node=node_of(e))

if STOP:
    for ref in inflight:
        try:
            ray.cancel(ref, force=False)
        except Exception:  # noqa: BLE001
            pass
    until = time.time() + SPEC["grace"] + 20
    while inflight and time.time() < until:
        ready, _ = ray.wait(list(inflight), num_returns=len(inflight), timeout=0.5, fetch_local=False)
        for ref in ready:
            i = inflight.pop(ref)
            try:
                out = ray.get(ref)
                emit(event="end", index=i, ok=True, code=out["code"], node=out["node"])
            except Exception as e:  # noqa: BLE001
                emit(event="end", index=i, ok=False, cancelled=True, error=describe(e))
    for ref in inflight:
        try:
            ray.cancel(ref, force=True)
        except Exception:  # noqa: BLE001
            pass
    emit(event="cancelled", unsubmitted=len(pending), unfinished=len(inflight))
else:
    emit(event="done")
ray.shutdown()
