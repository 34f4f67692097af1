"""Kueue's manager (sigs.k8s.io/kueue v0.17.0, `cmd/kueue`) beside the test world, for the facts of
its alpha FailureRecoveryPolicy (tests/controllers/test_kueue_failure_recovery_facts.py).

Build: `python -m tests.controllers.kueue_world` (or the test's first run) builds the manager
with tests.support.controlplane.build's GoBinary/ensure_built (CGO_ENABLED=0, -trimpath,
-ldflags "-s -w", the version stamped into sigs.k8s.io/kueue/pkg/version) into
`~/.cache/podsweeper/kueue-v0.17.0-stamped/kueue`. It is built in a scratch module under the
cache, `world-gomod-kueue-v0.17.0/`: Kueue's own go.mod and go.sum (it has no replace lines)
with the module renamed and `sigs.k8s.io/kueue v0.17.0` required, so the dependency versions
are exactly Kueue's. v0.17.0 is the newest v0.17 the module proxy serves here (v0.17.8 answers
403 "This module version is not available").

Run (`Kueue(cp, workdir).start()`): out of cluster, the admin kubeconfig, with:

- the CRDs of `config/components/crd/bases` (no conversion webhook: the kustomize patches that
  add one are not applied), server-side applied and waited Established;
- a `config.kueue.x-k8s.io/v1beta2` Configuration: `featureGates: {FailureRecoveryPolicy: true,
  VisibilityOnDemand: false}` (the visibility API server would bind :8082 on every address),
  leader election off, `internalCertManagement.enable: false`, the webhook server on
  127.0.0.1:<free> with a per-run pair (the world's webhook_cert; no webhook configuration is
  installed: the tests' pods are plain pods), health probes and metrics on 127.0.0.1:<free>;
- the metrics server's certificate: with internal cert management off, v0.17.0's main.go reads
  it from the hard-coded `/etc/kueue/metrics/certs/tls.{crt,key}` and exits when they are
  missing. So the process runs in a private mount namespace (`unshare --mount`, root) in which a
  directory of the run is bind-mounted there; only `/etc/kueue/metrics/certs` is created (empty)
  on the machine if it was not there, as the mount point.

Ready: `/readyz` 200 and "Starting workers" from failure-recovery-pod-termination-controller.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from tests.support.controlplane.build import GoBinary, cache_root, ensure_built
from tests.support.world import trainer_world

KUEUE_MODULE = "sigs.k8s.io/kueue"
KUEUE_VERSION = "v0.17.0"
FEATURE_GATE = "FailureRecoveryPolicy"
CONTROLLER = "failure-recovery-pod-termination-controller"  # its logger name
METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")  # cmd/kueue/main.go v0.17.0, hard-coded
SCRATCH = cache_root() / f"world-gomod-kueue-{KUEUE_VERSION}"

KUEUE = GoBinary(
    "kueue",
    KUEUE_VERSION,
    f"{KUEUE_MODULE}/cmd/kueue",
    SCRATCH,
    stamp=(
        f"{KUEUE_MODULE}/pkg/version.GitVersion={KUEUE_VERSION}",
        f"{KUEUE_MODULE}/pkg/version.BuildDate=2026-01-01T00:00:00Z",
    ),
    cold_build="5-15 minutes",
)


class KueueError(RuntimeError):
    """Kueue could not be built, installed or started; carries the log tail."""


def module_dir() -> Path:
    """Kueue's module in the Go module cache (downloaded on first use)."""
    from tests.support.controlplane.manifests import go_module_dir

    return go_module_dir(KUEUE_MODULE, KUEUE_VERSION)


def prepare_scratch() -> Path:
    """The scratch module: Kueue's go.mod renamed + `require sigs.k8s.io/kueue`, its go.sum."""
    source = module_dir()
    SCRATCH.mkdir(parents=True, exist_ok=True)
    gomod = (source / "go.mod").read_text()
    lines = gomod.splitlines()
    assert lines[0] == f"module {KUEUE_MODULE}", lines[0]
    lines[0] = "module podsweeper.dev/world/kueue"
    text = "\n".join(lines) + f"\n\nrequire {KUEUE_MODULE} {KUEUE_VERSION}\n"
    mod = SCRATCH / "go.mod"
    if not mod.exists() or mod.read_text() != text:  # keep go.sum lines a build added
        shutil.copyfile(source / "go.sum", SCRATCH / "go.sum")
        (SCRATCH / "go.sum").chmod(0o644)
        mod.write_text(text)
    return SCRATCH


def build(log=sys.stderr) -> Path:
    return ensure_built(KUEUE, log=log, prepare=prepare_scratch)


def crds() -> list[dict]:
    import yaml

    base = module_dir() / "config" / "components" / "crd" / "bases"
    docs: list[dict] = []
    for path in sorted(base.glob("*.yaml")):
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


class Kueue:
    """One Kueue manager, out of cluster, on a running ControlPlane (`cp`)."""

    def __init__(self, cp, workdir: Path | None = None, log=sys.stderr, feature_gate: bool = True):
        self.cp = cp
        self.log = log
        self.feature_gate = feature_gate
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="podsweeper-kueue-"))
        self.process = None
        self.probe_port = 0
        self.metrics_port = 0
        self.timings: dict[str, float] = {}

    def say(self, text: str) -> None:
        print(f"kueue: {text}", file=self.log, flush=True)

    # -- install ------------------------------------------------------------------------

    def install_crds(self) -> None:
        from tests.support.controlplane.launcher import Kube
        from tests.support.harness.waiting import wait_for

        kube = Kube(self.cp.url, self.cp.tokens["admin"], self.cp.ca_file, error=KueueError)
        kube.field_manager = "podsweeper-kueue-world"
        try:
            names = []
            for crd in crds():
                names.append(crd["metadata"]["name"])
                kube.request(
                    "PATCH",
                    f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{names[-1]}",
                    crd,
                    content_type="application/apply-patch+yaml",
                    params={"fieldManager": kube.field_manager, "force": "true"},
                )

            def established() -> bool:
                for name in names:
                    crd = kube.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}") or {}
                    conds = (crd.get("status") or {}).get("conditions") or []
                    if not any(c["type"] == "Established" and c["status"] == "True" for c in conds):
                        return False
                return True

            wait_for(f"{len(names)} Kueue CRDs Established", established, timeout=60)
            self.crd_names = names
        finally:
            kube.close()

    # -- run ----------------------------------------------------------------------------

    def config(self, webhook_port: int) -> dict:
        gates = {FEATURE_GATE: True} if self.feature_gate else {}
        gates["VisibilityOnDemand"] = False
        return {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "namespace": "kueue-system",
            "featureGates": gates,
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "webhook": {
                "port": webhook_port,
                "host": "127.0.0.1",
                "certDir": str(self.workdir / "webhook-certs"),
            },
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.probe_port}"},
            "metrics": {"bindAddress": f"127.0.0.1:{self.metrics_port}"},
        }

    def start(self, binary: Path | None = None) -> Kueue:
        import yaml

        from tests.support.harness.ports import free_port
        from tests.support.harness.processes import Process, answers_ok

        if os.geteuid() != 0:
            raise KueueError("root is needed: Kueue runs in a mount namespace of its own (unshare --mount)")
        t0 = time.monotonic()
        binary = binary or build(self.log)
        self.timings["build"] = time.monotonic() - t0
        t0 = time.monotonic()
        self.install_crds()
        self.timings["crds"] = time.monotonic() - t0

        t0 = time.monotonic()
        # Serving pairs for 127.0.0.1/localhost (their CA is not needed: nothing verifies them).
        trainer_world.generate_pair(self.workdir / "webhook-certs")
        trainer_world.generate_pair(self.workdir / "metrics-certs")
        self.probe_port, self.metrics_port, webhook_port = free_port(), free_port(), free_port()
        self.webhook_port = webhook_port
        config = self.workdir / "kueue-config.yaml"
        config.write_text(yaml.safe_dump(self.config(webhook_port)))
        METRICS_CERT_DIR.mkdir(parents=True, exist_ok=True)  # the mount point
        inner = (
            f"mount --bind {self.workdir / 'metrics-certs'} {METRICS_CERT_DIR} && "
            f'exec {binary} --config={config} --zap-log-level=4 "$@"'
        )
        argv = [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            inner,
            "kueue",
        ]
        env = {**os.environ, "KUBECONFIG": str(self.cp.kubeconfig("admin"))}
        self.process = Process("kueue", self.workdir / "kueue.log", error=KueueError).launch(
            argv, env=env, cwd=self.workdir
        )
        self.process.wait(
            "answer /readyz", lambda: answers_ok(f"http://127.0.0.1:{self.probe_port}/readyz"), timeout=90
        )
        if self.feature_gate:
            self.process.wait(
                f"start the {CONTROLLER}",
                lambda: CONTROLLER in self._started_workers(),
                timeout=60,
            )
        self.timings["start"] = time.monotonic() - t0
        self.say(f"ready in {self.timings['start']:.1f}s (log {self.process.log_path})")
        return self

    def _started_workers(self) -> str:
        assert self.process is not None
        return "\n".join(line for line in self.process.text().splitlines() if "Starting workers" in line)

    def log_lines(self, needle: str) -> list[str]:
        assert self.process is not None
        return [line for line in self.process.text().splitlines() if needle in line]

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

    def __enter__(self) -> Kueue:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    t0 = time.monotonic()
    print(build(), f"({time.monotonic() - t0:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
