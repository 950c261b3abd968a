"""A real two-node Ray cluster on this machine for hwr-exp's Ray tests (tests/integration/ray.rs).

Prints one JSON line {"address", "head", "second"} (node ids) once both nodes are up, then reads
commands on stdin, one a line: `kill second` kills the second node's raylet and every process
of that node at once (no graceful shutdown, as when a machine dies) and answers `killed`; `quit`
(or the end of stdin) shuts the cluster down. Small on purpose: 2 CPUs a node, an 80 MB object
store, no dashboard.
"""
import json
import os
import signal
import sys


def children(pid):
    """The processes whose parent is `pid` (from /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if int(fields[1]) == pid:
            out.append(int(entry))
    return out


os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from ray.cluster_utils import Cluster  # noqa: E402

STORE = 80 * 1024 * 1024
cluster = Cluster(
    initialize_head=True,
    head_node_args={
        "num_cpus": 2,
        "object_store_memory": STORE,
        "include_dashboard": False,
        "resources": {"head": 1},
        "node_ip_address": "127.0.0.1",
        # A dead node is noticed within about two seconds.
        "_system_config": {
            "health_check_initial_delay_ms": 0,
            "health_check_period_ms": 500,
            "health_check_timeout_ms": 500,
            "health_check_failure_threshold": 3,
        },
    },
)
second = cluster.add_node(
    num_cpus=2, object_store_memory=STORE, resources={"second": 1}, node_ip_address="127.0.0.1"
)
cluster.wait_for_nodes()
print(
    json.dumps(
        {
            "address": cluster.address,
            "head": cluster.head_node.node_id,
            "second": second.node_id,
            "second_raylet": second.all_processes["raylet"][0].process.pid,
        }
    ),
    flush=True,
)
for line in sys.stdin:
    command = line.strip()
    if command == "kill second":
        # As when the machine dies: the raylet and its worker processes at once (each task's
        # hwr-exp gets its parent-death signal), then whatever else of the node is left.
        raylet = second.all_processes["raylet"][0].process.pid
        workers = children(raylet)
        for pid in [raylet] + workers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        cluster.remove_node(second, allow_graceful=False)
        print(json.dumps({"killed": raylet, "workers": workers}), flush=True)
    elif command == "quit":
        break
cluster.shutdown()
