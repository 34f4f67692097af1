"""Knative Serving's real controllers, out of cluster, on the test control plane.

Three binaries of knative.dev/serving (SERVING_VERSION), `tool`s of the Go module
tests/support/deploy/knativevalidate (so they share its module graph and Go build cache), built
with tests.support.controlplane.build.ensure_built into ``~/.cache/podsweeper/<name>-<version>/``:

- ``cmd/controller``: Service -> Configuration -> Revision -> Deployment, Route, SKS, ...;
- ``cmd/autoscaler``: the KPA (PodAutoscaler) and Metric reconcilers;
- ``cmd/webhook``: the defaulting/validating admission webhooks and the ConfigMap validation.

What they need outside a cluster, all read from the Go module cache (the module wins over any
copy of ours): the CRDs of serving (``config/core/300-resources``), knative.dev/networking
(Certificate, Ingress, ServerlessService, ClusterDomainClaim) and knative.dev/caching (Image);
the ConfigMaps of ``config/core/configmaps`` and networking's ``config-network``, with
``config-deployment`` given a ``queue-sidecar-image`` (the shipped one is a ``ko://``
placeholder) and ``registries-skipping-tag-resolving`` (tag-to-digest resolution would contact
a registry, and none is reachable); the environment of their Deployments in
``config/core/deployments`` (``POD_NAME``, ``SYSTEM_NAMESPACE``, ``CONFIG_LOGGING_NAME``,
``CONFIG_OBSERVABILITY_NAME``; the autoscaler's ``POD_IP``, the webhook's ``WEBHOOK_NAME`` and
``WEBHOOK_PORT``).

**One network namespace each.** All three bind fixed ports on every interface, as in their
pods: the controller's health probes ``:8080`` (a const in knative.dev/pkg), the autoscaler's
stats server ``:8080`` (a const in its main.go), profiling ``:8008``, the webhook ``:8443``.
Two of them on one host cannot both start (the second exits when its bind fails), nor beside
anything else of the machine on 8080. So each runs in a network namespace of its own
(``unshare --net``, then ``nsenter``), like a pod; a forwarder thread of this process listens on
``127.0.0.1:<API server port>`` *inside* each namespace and connects to the API server outside,
so the kubeconfig is unchanged. Needs root (CAP_SYS_ADMIN) and util-linux's unshare/nsenter.

**The webhook.** Knative's webhook configurations (``config/core/webhooks``) name Service
``webhook`` of ``knative-serving``. The API server reaches a webhook Service at its ClusterIP
(no ``--enable-aggregator-routing``, so Endpoints are never used), and nothing routes
ClusterIPs here; but for a Service of type ExternalName it dials ``<externalName>:<port>``.
So the Service is ExternalName ``127.0.0.1``, each webhook's ``clientConfig.service.port`` a
free port where a forwarder listens and passes the connection to ``:8443`` in the webhook's
namespace. TLS is checked against ``webhook.knative-serving.svc``, the name the webhook's own
certificates controller puts in the Secret ``webhook-certs`` it fills. ``webhook=False`` runs
without it: the reconcilers then apply the defaults in memory (nothing is defaulted in etcd).

    with KnativeServing(world.control_plane) as serving:
        ...  # apply a serving.knative.dev/v1 Service
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from tests.support.controlplane.build import GoBinary, ensure_built
from tests.support.controlplane.launcher import Kube
from tests.support.harness.netns import NetNamespace
from tests.support.harness.processes import Process, tails, wait_until

HERE = Path(__file__).parent
GOMOD = HERE.parent / "deploy" / "knativevalidate"
SERVING_MODULE = "knative.dev/serving"
SERVING_VERSION = "v0.49.1"  # Knative 1.22; the version knativevalidate's go.mod requires
SYSTEM_NAMESPACE = "knative-serving"
FIELD_MANAGER = "podsweeper-tests"

CONTROLLER = GoBinary(
    "knative-serving-controller", SERVING_VERSION, f"{SERVING_MODULE}/cmd/controller", GOMOD
)
AUTOSCALER = GoBinary(
    "knative-serving-autoscaler", SERVING_VERSION, f"{SERVING_MODULE}/cmd/autoscaler", GOMOD
)
WEBHOOK = GoBinary("knative-serving-webhook", SERVING_VERSION, f"{SERVING_MODULE}/cmd/webhook", GOMOD)
BINARIES = {"controller": CONTROLLER, "autoscaler": AUTOSCALER, "webhook": WEBHOOK}

# No container runs here, so no image is ever pulled: a name is all the Deployment needs. ko.local
# is in Knative's own example list of registries that skip tag resolution.
QUEUE_SIDECAR_IMAGE = "ko.local/knative.dev/serving/cmd/queue:" + SERVING_VERSION
# The shipped image's registry first: resolving ghcr.io/podsweeper/podsweeper:0.1.0 to a digest
# would need the registry.
SKIP_TAG_RESOLVING = "ghcr.io,ko.local,kind.local,dev.local"
# kube-controller-manager controllers Serving needs beyond the world's: Deployment -> ReplicaSet,
# and the Endpoints of the revision's private Service that the SKS reconciler reads.
KCM_CONTROLLERS = ("deployment-controller", "endpoints-controller")
# Each component's "pod IP", on the loopback of its network namespace (kwok's pods get 10.244/16).
POD_IPS = {"controller": "10.255.0.1", "autoscaler": "10.255.0.2", "webhook": "10.255.0.3"}
WEBHOOK_PORT = 8443  # as in config/core/deployments/webhook.yaml, inside its namespace


class ServingError(RuntimeError):
    """A Serving component could not be built, installed, started, or died; carries log tails."""


# -- module files ----------------------------------------------------------------------------


@functools.cache
def module_dir(package: str) -> Path:
    """The module-cache directory of the module providing `package`, at the version knativevalidate's
    go.mod selects. (`go list` of a package, not `go mod download`: the proxy answers 403 for the
    .info of knative.dev/caching's pseudo-version although it serves its .mod and .zip.)"""
    go = shutil.which("go")
    if go is None:
        raise ServingError("go is not on PATH: needed to find Knative's modules")
    proc = subprocess.run(
        [go, "list", "-f", "{{.Module.Dir}}", package],
        cwd=GOMOD,
        env={**os.environ, "GOFLAGS": "-mod=readonly"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode != 0 or not proc.stdout.strip():
        raise ServingError(f"go list {package} (in {GOMOD}) failed:\n{proc.stderr}")
    return Path(proc.stdout.strip())


def _load(path: Path) -> list[dict]:
    with path.open() as f:
        return [doc for doc in yaml.safe_load_all(f) if doc]


def crds() -> list[dict]:
    """Serving's, networking's and caching's CRDs, from their modules."""
    serving = module_dir(f"{SERVING_MODULE}/pkg/apis/serving/v1")
    networking = module_dir("knative.dev/networking/pkg/apis/networking/v1alpha1")
    caching = module_dir("knative.dev/caching/pkg/apis/caching/v1alpha1")
    paths = [
        *sorted((serving / "config/core/300-resources").glob("*.yaml")),
        *(
            networking / "config" / f"{name}.yaml"
            for name in ("certificate", "ingress", "serverlessservice", "domain-claim")
        ),
        caching / "config/image.yaml",
    ]
    found = [doc for path in paths for doc in _load(path) if doc.get("kind") == "CustomResourceDefinition"]
    if len(found) < 11:
        raise ServingError(f"expected 11 CRDs in {paths}, found {[c['metadata']['name'] for c in found]}")
    return found


def configmaps() -> list[dict]:
    """config/core/configmaps/*.yaml and networking's config-network, as shipped, but for
    config-deployment's queue-sidecar-image and registries-skipping-tag-resolving."""
    serving = module_dir(f"{SERVING_MODULE}/pkg/apis/serving/v1")
    networking = module_dir("knative.dev/networking/pkg/apis/networking/v1alpha1")
    maps = [
        doc
        for path in [
            *sorted((serving / "config/core/configmaps").glob("*.yaml")),
            networking / "config/config-network.yaml",
        ]
        for doc in _load(path)
        if doc.get("kind") == "ConfigMap"
    ]
    for cm in maps:
        if cm["metadata"]["name"] == "config-deployment":
            cm["data"]["queue-sidecar-image"] = QUEUE_SIDECAR_IMAGE
            cm["data"]["registries-skipping-tag-resolving"] = SKIP_TAG_RESOLVING
    return maps


def deployment_env(component: str, pod_name: str, pod_ip: str) -> dict[str, str]:
    """The env of config/core/deployments/<component>.yaml, with its fieldRefs filled in."""
    serving = module_dir(f"{SERVING_MODULE}/pkg/apis/serving/v1")
    (deployment,) = [
        d for d in _load(serving / f"config/core/deployments/{component}.yaml") if d["kind"] == "Deployment"
    ]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    fields = {"metadata.name": pod_name, "metadata.namespace": SYSTEM_NAMESPACE, "status.podIP": pod_ip}
    env = {}
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = var["value"]
        else:
            path = var["valueFrom"]["fieldRef"]["fieldPath"]
            if path not in fields:
                raise ServingError(f"{component}: env {var['name']} from {path}: not known here")
            env[var["name"]] = fields[path]
    return env


def webhook_objects() -> list[dict]:
    """config/core/webhooks/*.yaml: the Secret and the three webhook configurations."""
    serving = module_dir(f"{SERVING_MODULE}/pkg/apis/serving/v1")
    return [doc for path in sorted((serving / "config/core/webhooks").glob("*.yaml")) for doc in _load(path)]


def build_all(log=sys.stderr) -> dict[str, Path]:
    return {name: ensure_built(binary, log=log) for name, binary in BINARIES.items()}


# -- the components --------------------------------------------------------------------------


class KnativeServing:
    """controller + autoscaler (+ webhook) of Knative Serving on a running ControlPlane.

    The ControlPlane must have kube-controller-manager with KCM_CONTROLLERS and pods that become
    Ready (tests/support/world: `World(extra_controllers=KCM_CONTROLLERS)`) for a Revision to get
    pods at all. Attributes once started: ``workdir`` (logs), ``timings``, ``webhook_port``.
    """

    def __init__(self, control_plane, *, webhook: bool = True, log=sys.stderr, ready_timeout: float = 90.0):
        self.control_plane = control_plane
        self.webhook = webhook
        self.log = log
        self.ready_timeout = ready_timeout
        self.workdir: Path | None = None
        self.webhook_port = 0
        self.timings: dict[str, float] = {}
        self.kube: Kube | None = None
        self._procs: dict[str, Process] = {}
        self._netns: dict[str, NetNamespace] = {}
        self._webhook_configurations: list[dict] = []

    def __enter__(self) -> KnativeServing:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> KnativeServing:
        t0 = time.monotonic()
        atexit.register(self.stop)
        try:
            bins = build_all(self.log)
            self.timings["build"] = time.monotonic() - t0
            self.workdir = Path(tempfile.mkdtemp(prefix="podsweeper-serving-"))
            cp = self.control_plane
            self.kube = Kube(
                cp.url, cp.tokens["admin"], cp.ca_file, error=ServingError, field_manager=FIELD_MANAGER
            )
            self._phase("install", self._install)
            if self.webhook:
                self._phase("webhook", lambda: self._start_webhook(bins["webhook"]))
            self._phase("controller", lambda: self._start("controller", bins["controller"]))
            self._phase("autoscaler", lambda: self._start("autoscaler", bins["autoscaler"]))
            self._phase("leases", self._wait_leases)
        except BaseException:
            self.stop()
            raise
        self.timings["total"] = time.monotonic() - t0
        self._say(f"ready in {self.timings['total']:.1f}s ({self._timings()}); logs in {self.workdir}")
        return self

    def stop(self) -> None:
        """Remove the webhook configurations (failurePolicy Fail would refuse every Knative object
        once the webhook is gone), stop the processes. Idempotent."""
        if self.kube is not None:
            for vwc in self._webhook_configurations:
                try:
                    self.kube.request("DELETE", self.kube.path_of(vwc), ok=(200, 404))
                except Exception as e:  # noqa: BLE001 - best effort while tearing down
                    self._say(f"could not remove {vwc['kind']} {vwc['metadata']['name']}: {e}")
            self._webhook_configurations.clear()
        for proc in reversed(list(self._procs.values())):
            proc.stop()
        for netns in self._netns.values():
            netns.close()
        self._procs.clear()
        self._netns.clear()
        if self.kube is not None:
            self.kube.session.close()
            self.kube = None
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None
        atexit.unregister(self.stop)

    def check_alive(self) -> None:
        for proc in self._procs.values():
            proc.check()

    def log_path(self, name: str) -> Path:
        """controller, autoscaler or webhook."""
        return self._procs[name].log_path

    def logs(self, name: str) -> str:
        return self._procs[name].text()

    def tails(self, lines: int = 15) -> str:
        return tails(list(self._procs.values()), lines)

    # -- phases --------------------------------------------------------------------------

    def _install(self) -> None:
        from tests.support.controlplane.manifests import install_crds

        kube = self.kube
        assert kube is not None
        kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM_NAMESPACE}})
        api = self.control_plane.api_client("admin")
        try:
            install_crds(api, crds(), timeout=90)
        finally:
            api.close()
        for cm in configmaps():
            kube.apply(cm)

    def _start(self, component: str, binary: Path, env: dict | None = None) -> NetNamespace:
        """The component in a network namespace of its own (returned), reaching the API server."""
        assert self.workdir is not None
        netns = NetNamespace(component, POD_IPS[component], self.workdir, error=ServingError)
        try:
            netns.forward_out(int(self.control_plane.url.rsplit(":", 1)[1]))
        except BaseException:
            netns.close()
            raise
        self._say(f"starting knative {component}")
        env = {**os.environ, **deployment_env(component, f"{component}-0", POD_IPS[component]), **(env or {})}
        argv = [
            "nsenter",
            f"--net={netns.path}",
            "--",
            str(binary),
            f"--kubeconfig={self.control_plane.admin_kubeconfig}",
        ]
        # The webhook drains for seconds after SIGTERM (a pod's grace for in-flight admission
        # calls); out of cluster nothing is in flight once its configurations are deleted.
        grace = 1.0 if component == "webhook" else 5.0
        proc = Process(
            f"knative {component}", self.workdir / f"{component}.log", error=ServingError, grace=grace
        )
        self._netns[component] = netns
        self._procs[component] = proc.launch(argv, env=env, cwd=self.workdir)
        return netns

    def _start_webhook(self, binary: Path) -> None:
        kube = self.kube
        assert kube is not None
        objects = webhook_objects()
        for secret in (o for o in objects if o["kind"] == "Secret"):
            kube.apply(secret)  # empty: the webhook's certificates controller fills it
        netns = self._start("webhook", binary, env={"WEBHOOK_PORT": str(WEBHOOK_PORT)})
        self.webhook_port = netns.forward_in(WEBHOOK_PORT)
        kube.apply(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "webhook", "namespace": SYSTEM_NAMESPACE},
                # The API server dials <externalName>:<clientConfig port> for an ExternalName
                # Service, the ClusterIP (unroutable here) for any other type.
                "spec": {"type": "ExternalName", "externalName": "127.0.0.1"},
            }
        )
        # The webhook waits for its certificate before it serves; configurations only then,
        # or every create of a Knative object in between would fail (failurePolicy Fail).
        self._wait(
            "webhook certificate in Secret webhook-certs",
            lambda: bool(
                (
                    (kube.get(f"/api/v1/namespaces/{SYSTEM_NAMESPACE}/secrets/webhook-certs") or {}).get(
                        "data"
                    )
                    or {}
                ).get("server-cert.pem")
            ),
        )
        for conf in (o for o in objects if o["kind"].endswith("WebhookConfiguration")):
            for hook in conf["webhooks"]:
                hook["clientConfig"]["service"]["port"] = self.webhook_port
            kube.apply(conf)
            self._webhook_configurations.append(conf)
        self._wait("the webhook denies an invalid Service (dry run)", self._webhook_denies)

    def _webhook_denies(self) -> bool:
        """A Service whose template sets the reserved PORT variable: the CRD schema allows it,
        only Knative's validation refuses it."""
        kube = self.kube
        assert kube is not None
        svc = {
            "apiVersion": "serving.knative.dev/v1",
            "kind": "Service",
            "metadata": {"name": "webhook-probe", "namespace": SYSTEM_NAMESPACE},
            "spec": {
                "template": {
                    "spec": {
                        "containers": [{"image": "ko.local/probe", "env": [{"name": "PORT", "value": "1"}]}]
                    }
                }
            },
        }
        path = kube.path("serving.knative.dev/v1", "Service", namespace=SYSTEM_NAMESPACE) + "?dryRun=All"
        r = kube.request("POST", path, body=svc, ok=(201, 400, 403, 422, 500))
        message = r.get("message", "")
        if "denied the request" in message and "reserved" in message:
            return True
        if r.get("kind") == "Service":
            raise ServingError(
                "the webhook is configured but an invalid Service passed a dry run:\n" + self.tails()
            )
        return False

    def _wait_leases(self) -> None:
        """Each component holds its leader-election Leases (every reconciler has one bucket):
        only then does it reconcile. The holder identities are the host name plus a uuid (the
        controller, the webhook) or POD_NAME_POD_IP (the autoscaler's bucket), so the Leases
        are told apart by name."""
        kube = self.kube
        assert kube is not None
        prefixes = {"controller": "controller.", "autoscaler": "autoscaler-bucket-", "webhook": "webhook."}
        wanted = [prefixes[c] for c in self._procs]

        def held() -> bool:
            leases = kube.request(
                "GET", f"/apis/coordination.k8s.io/v1/namespaces/{SYSTEM_NAMESPACE}/leases"
            )["items"]
            names = [i["metadata"]["name"] for i in leases if (i.get("spec") or {}).get("holderIdentity")]
            return all(any(n.startswith(p) for n in names) for p in wanted)

        self._wait("Leases held by every component", held)

    # -- helpers -------------------------------------------------------------------------

    def wait(self, what: str, condition, timeout: float | None = None):
        """Poll condition() until truthy (returned); ServingError with the log tails on timeout
        or when a component died."""
        return self._wait(what, condition, timeout)

    def _wait(self, what: str, condition, timeout: float | None = None):
        return wait_until(
            what,
            condition,
            timeout=timeout or self.ready_timeout,
            check=self.check_alive,
            tails=self.tails,
            error=ServingError,
        )

    def _phase(self, name: str, fn) -> None:
        t0 = time.monotonic()
        fn()
        self.timings[name] = time.monotonic() - t0

    def _timings(self) -> str:
        return ", ".join(f"{k} {v:.1f}s" for k, v in self.timings.items() if k != "total")

    def _say(self, message: str) -> None:
        print(f"serving: {message}", file=self.log, flush=True)


def main(argv: list[str] | None = None) -> int:
    """`python -m tests.support.knative.serving [build]`: build (or find) the three binaries."""
    for name, path in build_all().items():
        print(name, path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
