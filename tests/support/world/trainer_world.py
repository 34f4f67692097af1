"""The Kubeflow Trainer v2 phase of the test world: JobSet v0.12.0 and Trainer v2.3.0 controllers.

`World(trainer=True)` runs this after the training operator: a TrainJob
(trainer.kubeflow.org/v1alpha1) then runs for real, TrainJob -> JobSet -> batch Jobs (the
Job controller of kube-controller-manager) -> pods (scheduler, kwok stages).

Both controllers run out of cluster with a `--config` file in the world's work directory:
leader election off, metrics off (`bindAddress: "0"`), health probes and webhook servers on
free loopback ports, their own certificate management off. The webhook servers serve one
CA + serving pair generated per run (SANs 127.0.0.1 and localhost):

- JobSet reads it from `webhook.certDir` (configurable) and binds `webhook.host: 127.0.0.1`;
- Trainer has no cert-dir setting: its webhook server takes controller-runtime's default
  `$TMPDIR/k8s-webhook-server/serving-certs`, so the process runs with TMPDIR set to a
  directory of the run (the v1 operator's directory under /tmp is left alone). Its
  `webhook.host` is configurable too: 127.0.0.1.

The four webhook configurations come from the modules' manifests (with the kustomize patches
applied by hand: names, the pod webhooks' objectSelector `jobset.sigs.k8s.io/jobset-name
Exists`, Trainer's `webhook-validation` opt-out) with `clientConfig.url =
https://127.0.0.1:<port><path>` and the run's CA. Trainer's `torch-distributed`
ClusterTrainingRuntime is created from its manifests once its webhook answers.
"""

from __future__ import annotations

import base64
import copy
import datetime
import os
import time
from pathlib import Path

import yaml

from tests.support.controlplane.manifests import go_module_dir, load_yaml
from tests.support.controlplane.versions import JOBSET_MODULE, JOBSET_VERSION, TRAINER_MODULE, TRAINER_VERSION
from tests.support.harness.ports import free_port
from tests.support.harness.processes import answers_ok
from tests.support.world import webhook_cert

JOBSET_WEBHOOKS = ("jobset-mutating-webhook-configuration", "jobset-validating-webhook-configuration")
TRAINER_WEBHOOKS = ("defaulter.trainer.kubeflow.org", "validator.trainer.kubeflow.org")  # its main.go
RUNTIMES = ("torch-distributed",)  # ClusterTrainingRuntimes installed from manifests/base/runtimes
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
CTR_PATH = "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes"


def generate_pair(directory: Path) -> bytes:
    """A CA and a serving pair for 127.0.0.1/localhost in directory (tls.crt, tls.key); the CA PEM."""
    pair = webhook_cert.generate("podsweeper-world-trainer-ca", ["localhost"], datetime.timedelta(days=30))
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tls.crt").write_bytes(pair["tls.crt"])
    (directory / "tls.key").write_bytes(pair["tls.key"])
    (directory / "tls.key").chmod(0o600)
    return pair["ca.crt"]


def _point_at(hooks: list[dict], port: int, ca: bytes) -> None:
    for hook in hooks:
        path = hook["clientConfig"]["service"]["path"]
        hook["clientConfig"] = {
            "url": f"https://127.0.0.1:{port}{path}",
            "caBundle": base64.b64encode(ca).decode(),
        }
        hook["timeoutSeconds"] = 10


def jobset_webhooks(port: int, ca: bytes) -> list[dict]:
    """JobSet's mutating + validating configurations, as its config/default kustomization renders them."""
    module = go_module_dir(JOBSET_MODULE, JOBSET_VERSION)
    configs = load_yaml(module / "config/components/webhook/manifests.yaml")
    pod_selector = {"matchExpressions": [{"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}]}
    for config, name in zip(configs, JOBSET_WEBHOOKS, strict=True):
        config["metadata"] = {"name": name}  # namePrefix "jobset-"
        for hook in config["webhooks"]:
            if hook["rules"][0]["resources"] == ["pods"]:  # patches/{mutating,validating}-patch.yaml
                hook["objectSelector"] = pod_selector
        _point_at(config["webhooks"], port, ca)
    return configs


def trainer_webhooks(port: int, ca: bytes) -> list[dict]:
    """Trainer's defaulter + validator configurations (manifests/base/webhook with its patches)."""
    module = go_module_dir(TRAINER_MODULE, TRAINER_VERSION)
    configs = load_yaml(module / "manifests/base/webhook/manifests.yaml")
    opt_out = {
        "matchExpressions": [
            {"key": "trainer.kubeflow.org/webhook-validation", "operator": "NotIn", "values": ["disabled"]}
        ]
    }
    for config, name in zip(configs, TRAINER_WEBHOOKS, strict=True):
        config["metadata"] = {"name": name}
        if config["kind"] == "ValidatingWebhookConfiguration":  # patch_validating.yaml: the runtimes
            for hook in config["webhooks"][:2]:
                hook["objectSelector"] = opt_out
        _point_at(config["webhooks"], port, ca)
    return configs


def runtimes() -> list[dict]:
    module = go_module_dir(TRAINER_MODULE, TRAINER_VERSION)
    docs = load_yaml(module / "manifests/base/runtimes/torch_distributed.yaml")
    return [d for d in docs if d["kind"] == "ClusterTrainingRuntime" and d["metadata"]["name"] in RUNTIMES]


VOLCANO_QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"  # read by Trainer's volcano plugin


def volcano_runtime(name: str, kind: str = "ClusterTrainingRuntime", queue: str | None = "default") -> dict:
    """torch-distributed on Volcano, as a `kind` (ClusterTrainingRuntime or a namespaced
    TrainingRuntime) named `name`: `podGroupPolicy.volcano: {}`, the queue annotation on the
    template (unless None) and the pods' `schedulerName: volcano` (Trainer v2.3.0 sets neither
    itself: tests/support/world/README.md, "Trainer with Volcano")."""
    (base,) = runtimes()
    spec = copy.deepcopy(base["spec"])
    spec["podGroupPolicy"] = {"volcano": {}}
    if queue is not None:
        spec["template"].setdefault("metadata", {}).setdefault("annotations", {})[
            VOLCANO_QUEUE_ANNOTATION
        ] = queue
    (node,) = spec["template"]["spec"]["replicatedJobs"]
    node["template"]["spec"]["template"]["spec"]["schedulerName"] = "volcano"
    return {"apiVersion": base["apiVersion"], "kind": kind, "metadata": {"name": name}, "spec": spec}


def webhook_paths() -> list[str]:
    return [
        f"{ADMISSION}/mutatingwebhookconfigurations/{JOBSET_WEBHOOKS[0]}",
        f"{ADMISSION}/validatingwebhookconfigurations/{JOBSET_WEBHOOKS[1]}",
        f"{ADMISSION}/mutatingwebhookconfigurations/{TRAINER_WEBHOOKS[0]}",
        f"{ADMISSION}/validatingwebhookconfigurations/{TRAINER_WEBHOOKS[1]}",
    ]


class TrainerPhase:
    """Starts JobSet and Trainer for a World (uses its _spawn/_request/_wait helpers)."""

    def __init__(self, world):
        self.world = world
        self.jobset_webhook_port = 0
        self.trainer_webhook_port = 0
        self.timings: dict[str, float] = {}

    def start(self, bins: dict, kubeconfig: str) -> None:
        world = self.world
        assert world.workdir is not None
        ca = generate_pair(world.workdir / "jobset-certs")
        # Same pair for Trainer, in the directory its webhook server reads under our TMPDIR.
        trainer_tmp = world.workdir / "trainer-tmp"
        trainer_certs = trainer_tmp / "k8s-webhook-server" / "serving-certs"
        trainer_certs.mkdir(parents=True)
        for name in ("tls.crt", "tls.key"):
            (trainer_certs / name).write_bytes((world.workdir / "jobset-certs" / name).read_bytes())

        t0 = time.monotonic()
        self._start_jobset(bins["jobset-controller"], kubeconfig, ca)
        self.timings["jobset"] = time.monotonic() - t0
        t0 = time.monotonic()
        self._start_trainer(bins["trainer-controller-manager"], kubeconfig, ca, trainer_tmp)
        self.timings["trainer"] = time.monotonic() - t0

    def remove_webhooks(self) -> None:
        """For a shared control plane: failurePolicy Fail would refuse JobSets and TrainJobs."""
        for path in webhook_paths():
            self.world._request("DELETE", path, ok=(200, 404))

    # -- JobSet ------------------------------------------------------------------------

    def _start_jobset(self, binary: Path, kubeconfig: str, ca: bytes) -> None:
        world = self.world
        self.jobset_webhook_port = port = free_port()
        probe = free_port()
        config = world.workdir / "jobset-config.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
                    "kind": "Configuration",
                    "leaderElection": {"leaderElect": False},
                    "internalCertManagement": {"enable": False},
                    "webhook": {
                        "port": port,
                        "host": "127.0.0.1",
                        "certDir": str(world.workdir / "jobset-certs"),
                    },
                    "metrics": {"bindAddress": "0"},
                    "health": {"healthProbeBindAddress": f"127.0.0.1:{probe}"},
                }
            )
        )
        proc = world._spawn(
            "jobset-controller",
            [
                str(binary),
                f"--kubeconfig={kubeconfig}",
                f"--config={config}",
                "--metrics-bind-address=0",  # its main.go reads the flag's value over the config's
                f"--health-probe-bind-address=127.0.0.1:{probe}",
                "--zap-devel=false",  # JSON lines at info, not the development console at debug
            ],
        )
        world._wait("jobset-controller /readyz", lambda: _ready(probe))
        world._wait(
            "jobset-controller: JobSet and Pod controllers started",
            lambda: proc.text().count("Starting workers") >= 2,
        )
        self._replace_webhooks(jobset_webhooks(port, ca))
        world._wait("JobSet defaulting webhook", self._jobset_defaulted)

    def _jobset_defaulted(self) -> bool:
        probe = {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": "world-webhook-probe", "namespace": "default"},
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "r",
                        "template": {
                            "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "c"}]}}}
                        },
                    }
                ]
            },
        }
        r = self.world._request(
            "POST",
            "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets?dryRun=All",
            body=probe,
            ok=(201, 500),
        )
        spec = (r.get("spec") or {}).get("replicatedJobs") or [{}]
        pod = spec[0].get("template", {}).get("spec", {}).get("template", {}).get("spec", {})
        return pod.get("restartPolicy") == "OnFailure"

    # -- Trainer -----------------------------------------------------------------------

    def _start_trainer(self, binary: Path, kubeconfig: str, ca: bytes, tmpdir: Path) -> None:
        world = self.world
        self.trainer_webhook_port = port = free_port()
        probe = free_port()
        config = world.workdir / "trainer-config.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "config.trainer.kubeflow.org/v1alpha1",
                    "kind": "Configuration",
                    "leaderElection": {"leaderElect": False},
                    "certManagement": {"enable": False},
                    "webhook": {"port": port, "host": "127.0.0.1"},
                    "metrics": {"bindAddress": "0"},
                    "health": {"healthProbeBindAddress": f"127.0.0.1:{probe}"},
                }
            )
        )
        # Its webhook cert dir is then $TMPDIR/k8s-webhook-server/serving-certs.
        env = {**os.environ, "TMPDIR": str(tmpdir)}
        proc = world._spawn(
            "trainer-controller-manager",
            [str(binary), f"--kubeconfig={kubeconfig}", f"--config={config}"],
            env=env,
        )
        world._wait("trainer-controller-manager /readyz", lambda: _ready(probe))
        world._wait(
            "trainer-controller-manager: TrainJob and runtime controllers started",
            lambda: proc.text().count("Starting workers") >= 3,
        )
        self._replace_webhooks(trainer_webhooks(port, ca))
        for runtime in runtimes():
            world._wait(
                f"ClusterTrainingRuntime {runtime['metadata']['name']} accepted by Trainer's webhook",
                lambda runtime=runtime: self._create_runtime(runtime),
            )

    def _create_runtime(self, runtime: dict) -> bool:
        r = self.world._request("POST", CTR_PATH, body=runtime, ok=(201, 409, 500))
        return r.get("kind") == "ClusterTrainingRuntime" or r.get("reason") == "AlreadyExists"

    # -- helpers -----------------------------------------------------------------------

    def _replace_webhooks(self, configs: list[dict]) -> None:
        for config in configs:
            kind = config["kind"].lower() + "s"
            name = config["metadata"]["name"]
            self.world._request("DELETE", f"{ADMISSION}/{kind}/{name}", ok=(200, 404))
            self.world._request("POST", f"{ADMISSION}/{kind}", body=config)


def _ready(port: int) -> bool:
    return answers_ok(f"http://127.0.0.1:{port}/readyz")
