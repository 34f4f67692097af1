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
when that fails; Knative's receive adapter and mtping bind the same port (ignoring a failure),
and `make test` runs several test files at once. So the operator runs in a network namespace
of its own (tests/support/harness/netns.py) whose loopback reaches the control plane's port
only: its :8080 is its own.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

from tests.support.harness.netns import NetNamespace

# The training operator's kinds, as its --enable-scheme takes them: all of them but MPIJob.
OPERATOR_SCHEMES = ("pytorchjob", "tfjob", "xgboostjob", "paddlejob", "jaxjob")
HEALTH_PORT = 8080  # hard-coded in cmd/mpi-operator/app/server.go: inside its own namespace
OPERATOR_ADDRESS = "10.255.1.1"  # its loopback address in that namespace (not routed anywhere)
LEASE = "mpi-operator"  # the lease's name (controllerName)
MPIJOBS = "/apis/kubeflow.org/v2beta1/mpijobs"


def operator_args() -> list[str]:
    """The training operator's flags for this profile: every kind but MPIJob."""
    return [f"--enable-scheme={scheme}" for scheme in OPERATOR_SCHEMES]


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
        netns = NetNamespace("mpi-operator", OPERATOR_ADDRESS, world.workdir, error=RuntimeError)
        world._netns.append(netns)
        netns.forward_out(urlsplit(world.control_plane.url).port)  # the kubeconfig's server
        env = {k: v for k, v in os.environ.items() if k not in ("KUBEFLOW_NAMESPACE", "KUBECONFIG")}
        proc = world._spawn(
            "mpi-operator",
            [
                "nsenter",
                f"--net={netns.path}",
                "--",
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
