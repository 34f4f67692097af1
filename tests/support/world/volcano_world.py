"""The Volcano v1.10.0 phase of the test world: gang scheduling, as in the seed's cluster.

`World(volcano=True)` runs this after kwok and before the training operator, which then starts
with `--gang-scheduler-name=volcano` (OPERATOR_ARGS). The operator exits at start unless the
PodGroup CRD is served (validateCRD in its main.go), hence the order. Then a job's pods get
`schedulerName: volcano` and the annotation `scheduling.k8s.io/group-name: <job>`, and the
operator creates a PodGroup (minMember = all replicas, queue `default`) and holds the pods
back until Volcano moves it to Inqueue.

- CRDs: every one under the module's config/crd/volcano/bases (PodGroup, Queue, batch Job,
  Command, Numatopology) and config/crd/jobflow/bases, since the controller manager runs all
  its controllers (its default `--controllers=*`, as the Helm chart does).
- vc-scheduler: out of cluster, leader election off, its scheduler conf being the one the
  Helm chart ships (installer/helm/chart/volcano/config/volcano-scheduler.conf: enqueue,
  allocate, backfill; priority, gang, conformance | overcommit, drf, predicates, capacity,
  nodeorder, binpack). It creates the `default` Queue itself at start.
- vc-controller-manager: out of cluster, leader election off: the queue controller opens
  the `default` Queue and keeps its status counts, the pg controller, the gc controller...
- Not run: the admission webhook manager (vc-webhook-manager). Its hooks default and
  validate Volcano's own batch Jobs, PodGroups and Queues and reject pods of a Pending
  PodGroup; none of what podsweeper does goes through them (it only deletes pods), and the
  operator creates PodGroups with every field already set. Leaving it out is said in
  docs/deploy.md.
"""

from __future__ import annotations

import time

from tests.fixtures.builders import secret_env
from tests.support.controlplane import manifests
from tests.support.controlplane.versions import VOLCANO_MODULE, VOLCANO_VERSION

SCHEDULER_NAME = "volcano"  # the pods' spec.schedulerName, the operator's gang scheduler name
DEFAULT_QUEUE = "default"
OPERATOR_ARGS = (f"--gang-scheduler-name={SCHEDULER_NAME}",)
SCHEDULER_CONF = "installer/helm/chart/volcano/config/volcano-scheduler.conf"
SCHEDULING = "/apis/scheduling.volcano.sh/v1beta1"


def scheduler_conf() -> str:
    """The scheduler configuration the Helm chart of this version installs."""
    return (manifests.go_module_dir(VOLCANO_MODULE, VOLCANO_VERSION) / SCHEDULER_CONF).read_text()


class VolcanoPhase:
    """Starts Volcano's controller manager and scheduler for a World (its _spawn/_request/_wait)."""

    def __init__(self, world):
        self.world = world
        self.timings: dict[str, float] = {}

    def start(self, bins: dict, kubeconfig: str) -> None:
        world = self.world
        assert world.workdir is not None
        t0 = time.monotonic()
        api = world.control_plane.api_client("admin")
        try:
            manifests.install_crds(api, manifests.volcano_crds(), timeout=60)
        finally:
            api.close()
        self.timings["crds"] = time.monotonic() - t0

        t0 = time.monotonic()
        conf = world.workdir / "volcano-scheduler.conf"
        conf.write_text(scheduler_conf())
        common = [f"--kubeconfig={kubeconfig}", "--leader-elect=false", "--logtostderr", "-v=2"]
        world._spawn("vc-controller-manager", [str(bins["vc-controller-manager"]), *common])
        world._spawn(
            "vc-scheduler",
            [
                str(bins["vc-scheduler"]),
                *common,
                f"--scheduler-conf={conf}",
                "--cache-dumper=false",  # it would dump its cache into /tmp on a signal
            ],
        )
        world._wait(f"Volcano Queue {DEFAULT_QUEUE} created and Open", self._queue_open)
        self.timings["start"] = time.monotonic() - t0

    def _queue_open(self) -> bool:
        queue = self.world._request("GET", f"{SCHEDULING}/queues/{DEFAULT_QUEUE}", ok=(200, 404))
        return queue.get("kind") == "Queue" and (queue.get("status") or {}).get("state") == "Open"


# -- what the tests read and create --------------------------------------------------------


class Volcano:
    """The few Volcano reads the tests make, as plain dicts (admin ApiClient)."""

    def __init__(self, api):
        from kubernetes import client

        self.custom = client.CustomObjectsApi(api)

    def podgroup(self, ns: str, name: str) -> dict | None:
        from kubernetes.client.rest import ApiException

        try:
            return self.custom.get_namespaced_custom_object(
                "scheduling.volcano.sh", "v1beta1", ns, "podgroups", name
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def queue(self, name: str = DEFAULT_QUEUE) -> dict:
        return self.custom.get_cluster_custom_object("scheduling.volcano.sh", "v1beta1", "queues", name)

    def allocated_gpus(self, name: str = DEFAULT_QUEUE) -> int:
        """The Queue's status.allocated nvidia.com/gpu: what Volcano counts as in use."""
        allocated = (self.queue(name).get("status") or {}).get("allocated") or {}
        return int(allocated.get("nvidia.com/gpu", "0"))


def gpu_job(name: str, workers: int, run_for: str = "1h") -> dict:
    """A PyTorchJob of 1 master + `workers` workers, 1 GPU each, all running for `run_for`: its
    PodGroup (minMember = every replica) fits only where that many GPUs are free at once."""
    template = {
        "metadata": {
            "annotations": {"sim.podsweeper.dev/exit-code": "0", "sim.podsweeper.dev/run-for": run_for}
        },
        "spec": {
            "containers": [
                {
                    "name": "pytorch",
                    "image": "sim",
                    "env": secret_env(),
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ]
        },
    }
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": template},
                "Worker": {"replicas": workers, "restartPolicy": "OnFailure", "template": template},
            }
        },
    }
