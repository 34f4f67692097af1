"""The mpi-operator phase of the test world: github.com/kubeflow/mpi-operator v0.8.0, MPIJob v2beta1.

`World(mpi_operator=True)` runs it after the training operator: an MPIJob
(kubeflow.org/v2beta1) then runs for real, MPIJob -> worker pods (controlled by the MPIJob) +
the launcher batch Job `<name>-launcher` (the Job controller of kube-controller-manager) ->
the launcher pod (controlled by that Job), all on kwok.

The two operators cannot both serve `mpijobs.kubeflow.org`, so in this profile:

- the control plane serves the mpi-operator's CRD (v2beta1 only) instead of the training
  operator's v1 one (`ControlPlane(mpi_operator=True)`; World passes it on when it starts its
  own control plane, and refuses one that serves MPIJob v1);
- the training operator runs with `--enable-scheme` for every kind but MPIJob
  (`operator_args`), so it never watches mpijobs;
- the mpi-operator runs out of cluster with `--kubeConfig` (its flag's spelling), every
  namespace (`KUBEFLOW_NAMESPACE` unset, no `--namespace`), `--monitoring-port=0` (no
  metrics), its lease in the world's `kubeflow` namespace (`--lock-namespace`). Leader
  election cannot be turned off; a lease left by an earlier run is deleted first, or the new
  process would wait out its 15 s.

Its health server binds the fixed `:8080` (server.go `healthCheckPort`, not a flag) and exits
when that fails. Knative's receive adapter binds the same port but ignores a failure, so the
world must start before any adapter; `start` waits for the port to be free first.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

# The training operator's kinds, as its --enable-scheme takes them: all of them but MPIJob.
OPERATOR_SCHEMES = ("pytorchjob", "tfjob", "xgboostjob", "paddlejob", "jaxjob")
HEALTH_PORT = 8080  # hard-coded in cmd/mpi-operator/app/server.go
LEASE = "mpi-operator"  # the lease's name (controllerName)
MPIJOBS = "/apis/kubeflow.org/v2beta1/mpijobs"


def operator_args() -> list[str]:
    """The training operator's flags for this profile: every kind but MPIJob."""
    return [f"--enable-scheme={scheme}" for scheme in OPERATOR_SCHEMES]


def _port_free(port: int) -> bool:
    """Whether a listener could bind `:port` now, as Go's net/http does (SO_REUSEADDR set; a
    wildcard IPv4 bind also fails when a dual-stack [::] listener holds the port)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


class MpiPhase:
    """Starts the mpi-operator for a World (uses its _spawn/_request/_wait helpers)."""

    def __init__(self, world, lock_namespace: str):
        self.world = world
        self.lock_namespace = lock_namespace

    def start(self, binary: Path, kubeconfig: str) -> None:
        world = self.world
        served = world._request("GET", MPIJOBS, ok=(200, 404))
        if served.get("kind") != "MPIJobList":
            raise RuntimeError(
                "the control plane does not serve MPIJob kubeflow.org/v2beta1: start it with "
                "ControlPlane(mpi_operator=True)"
            )
        world._request(
            "DELETE",
            f"/apis/coordination.k8s.io/v1/namespaces/{self.lock_namespace}/leases/{LEASE}",
            ok=(200, 404),
        )
        world._wait(f"port {HEALTH_PORT} free (the mpi-operator's fixed health port)", _free_8080, 60)
        env = {k: v for k, v in os.environ.items() if k not in ("KUBEFLOW_NAMESPACE", "KUBECONFIG")}
        proc = world._spawn(
            "mpi-operator",
            [
                str(binary),
                f"--kubeConfig={kubeconfig}",
                "--monitoring-port=0",
                f"--lock-namespace={self.lock_namespace}",
                "--alsologtostderr",  # what its Deployment passes
            ],
            env=env,
        )
        world._wait(
            "mpi-operator: leading, workers started",
            lambda: "Started workers" in proc.text(),
        )


def _free_8080() -> bool:
    if _port_free(HEALTH_PORT):
        return True
    time.sleep(0.5)
    return False
