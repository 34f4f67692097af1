"""Figure 8's floor: bench/floor/, a client-go program making exactly podsweeper's calls for a
finished job (GET the job, LIST its pods 500 a page, DELETE each under uid + resourceVersion
preconditions, 16 at once, QPS/burst at podsweeper's defaults), with next to no client-side
cost. "podsweeper / floor" is then what podsweeper adds, on any machine.

The binary is built with `go build` from its module into
``$PODSWEEPER_CACHE/floor-<hash of bench/floor's sources>/floor`` (the harness's Go build,
as the control plane's binaries), so an edit of the sources builds anew and a second run builds
nothing.

    python -m bench.floor          # build it (if needed) and print its path
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from bench.cluster import GoBinary, ensure_built, source_digest
from bench.measure import PodWatch, control_plane_pids, cpu_seconds, now
from podsweeper.config import Settings

MODULE_DIR = Path(__file__).resolve().parent / "floor"
# The function's defaults (PODSWEEPER_KUBE_API_QPS / _BURST), which the floor runs at too.
QPS = float(Settings.model_fields["kube_api_qps"].default)
BURST = int(Settings.model_fields["kube_api_burst"].default)


def binary() -> GoBinary:
    return GoBinary(
        "floor", source_digest(MODULE_DIR), ".", MODULE_DIR, cold_build="about a minute", progress_every=50
    )


def ensure_floor(log=sys.stderr) -> Path:
    return ensure_built(binary(), log=log)


def floor_cleanup(cp, raw, admin, namespace: str, job: dict, pods: list[str], timeout: float = 120.0) -> dict:
    """Seconds from just before the job's Succeeded status write to its last pod's DELETED, the
    floor deleting its pods (as the function's user, in a namespace no adapter watches), and the
    CPU meanwhile: kube-apiserver's and etcd's (/proc), the floor's over its calls (getrusage).

    The floor starts first, loads its kubeconfig and warms its connections, then waits: the
    status write and the "go" on its stdin are back to back, as the function's calls follow the
    status write through the adapter.
    """
    name = job["metadata"]["name"]
    command = [
        str(ensure_floor()),
        f"--kubeconfig={cp.function_kubeconfig}",
        f"--namespace={namespace}",
        f"--job={name}",
        f"--qps={QPS:g}",
        f"--burst={BURST}",
        "--concurrency=16",
        "--wait-go",
    ]
    pids = control_plane_pids()
    proc = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdin is not None and proc.stdout is not None
    watch = None
    try:
        ready = proc.stdout.readline()
        if json.loads(ready or "{}").get("ready") is not True:
            proc.kill()
            raise RuntimeError(f"the floor did not get ready: {ready!r} {proc.communicate()[1][-500:]}")
        watch = PodWatch(admin, namespace)
        cpu0 = {k: cpu_seconds(v) for k, v in pids.items()}
        t0 = time.perf_counter()
        raw.job_conditions(job, [("Created", now()), ("Running", now()), ("Succeeded", now())])
        proc.stdin.write("go\n")
        proc.stdin.flush()
        last = watch.wait_gone(pods, timeout)
        cpu = {k: cpu_seconds(v) - cpu0[k] for k, v in pids.items()}
        out, err = proc.communicate(timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"the floor exited {proc.returncode}: {err.strip()[-500:]}")
        if last is None:
            raise RuntimeError(f"the floor's pods not gone after {timeout:.0f} s: {out.strip()}")
    finally:
        if watch is not None:
            watch.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    result = json.loads(out.strip().splitlines()[-1])
    cpu["floor (client-go)"] = float(result["cpu_seconds"])
    return {"seconds": last - t0, "cpu": cpu, "result": result}


def main() -> int:
    started = time.monotonic()
    path = ensure_floor()
    print(path)
    print(f"({time.monotonic() - started:.1f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
