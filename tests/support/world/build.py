"""The real components of the test world, built from Go modules and cached by version.

kube-controller-manager and kube-scheduler come from the control plane's own module
(tests/support/controlplane/gomod, k8s.io/kubernetes v1.36.3). Building them there with -mod=mod
would add go.sum lines to that module, which belongs to tests/support/controlplane: we build in a
scratch copy of its go.mod/go.sum under the cache instead. The training operator and kwok
each have their own small module here, because their k8s.io versions differ; so do the
Kubeflow Trainer v2 controller manager and the JobSet controller (one module, `trainer/`:
Trainer v2.3.0 pins JobSet v0.12.0). Those two are built only for `World(trainer=True)`; the mpi-operator (`mpi/`) only for
`World(mpi_operator=True)`; Volcano's scheduler and controller manager (`volcano/`, Kubernetes
1.30 libraries) only for `World(volcano=True)`.

`python -m tests.support.world.build [NAME...]` builds (or finds) them and prints their paths.
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

from tests.support.controlplane.build import GoBinary, cache_root, ensure_built
from tests.support.controlplane.versions import (
    JOBSET_MODULE,
    JOBSET_VERSION,
    KUBERNETES_VERSION,
    MPI_OPERATOR_MODULE,
    MPI_OPERATOR_VERSION,
    TRAINER_MODULE,
    TRAINER_VERSION,
    TRAINING_OPERATOR_MODULE,
    TRAINING_OPERATOR_VERSION,
    VOLCANO_MODULE,
    VOLCANO_VERSION,
)

HERE = Path(__file__).parent
CONTROLPLANE_GOMOD = HERE.parent / "controlplane" / "gomod"

KWOK_MODULE = "sigs.k8s.io/kwok"
KWOK_VERSION = "v0.8.0"


def _kubernetes_module() -> Path:
    """A copy of the control plane's go.mod/go.sum that a -mod=mod build may extend."""
    scratch = cache_root() / f"world-gomod-kubernetes-{KUBERNETES_VERSION}"
    scratch.mkdir(parents=True, exist_ok=True)
    mod = scratch / "go.mod"
    # A changed go.mod (version bump) starts over; otherwise keep the go.sum lines builds added.
    if not mod.exists() or mod.read_bytes() != (CONTROLPLANE_GOMOD / "go.mod").read_bytes():
        shutil.copyfile(CONTROLPLANE_GOMOD / "go.sum", scratch / "go.sum")
        shutil.copyfile(CONTROLPLANE_GOMOD / "go.mod", mod)
    return scratch


KUBE_CONTROLLER_MANAGER = GoBinary(
    "kube-controller-manager",
    KUBERNETES_VERSION,
    "k8s.io/kubernetes/cmd/kube-controller-manager",
    cache_root() / f"world-gomod-kubernetes-{KUBERNETES_VERSION}",
)
KUBE_SCHEDULER = GoBinary(
    "kube-scheduler",
    KUBERNETES_VERSION,
    "k8s.io/kubernetes/cmd/kube-scheduler",
    cache_root() / f"world-gomod-kubernetes-{KUBERNETES_VERSION}",
)
TRAINING_OPERATOR = GoBinary(
    "training-operator",
    TRAINING_OPERATOR_VERSION,
    f"{TRAINING_OPERATOR_MODULE}/cmd/training-operator.v1",
    HERE / "operator",
)
KWOK = GoBinary("kwok", KWOK_VERSION, f"{KWOK_MODULE}/cmd/kwok", HERE / "kwok")
TRAINER_CONTROLLER_MANAGER = GoBinary(
    "trainer-controller-manager",
    TRAINER_VERSION,
    f"{TRAINER_MODULE}/cmd/trainer-controller-manager",
    HERE / "trainer",
)
# JobSet's manager is the module root's main package.
JOBSET_CONTROLLER = GoBinary("jobset-controller", JOBSET_VERSION, JOBSET_MODULE, HERE / "trainer")

# The standalone mpi-operator (MPIJob v2beta1), built only for `World(mpi_operator=True)`.
MPI_OPERATOR = GoBinary(
    "mpi-operator", MPI_OPERATOR_VERSION, f"{MPI_OPERATOR_MODULE}/cmd/mpi-operator", HERE / "mpi"
)

CORE = {b.name: b for b in (KUBE_CONTROLLER_MANAGER, KUBE_SCHEDULER, TRAINING_OPERATOR, KWOK)}
# Volcano's scheduler and controller manager (one module, `volcano/`, with the k8s.io
# staging replace lines of Volcano's go.mod), built only for `World(volcano=True)`.
VC_SCHEDULER = GoBinary("vc-scheduler", VOLCANO_VERSION, f"{VOLCANO_MODULE}/cmd/scheduler", HERE / "volcano")
VC_CONTROLLER_MANAGER = GoBinary(
    "vc-controller-manager", VOLCANO_VERSION, f"{VOLCANO_MODULE}/cmd/controller-manager", HERE / "volcano"
)

TRAINER = {b.name: b for b in (JOBSET_CONTROLLER, TRAINER_CONTROLLER_MANAGER)}
MPI = {MPI_OPERATOR.name: MPI_OPERATOR}
VOLCANO = {b.name: b for b in (VC_SCHEDULER, VC_CONTROLLER_MANAGER)}
ALL = {**CORE, **TRAINER, **MPI, **VOLCANO}


def build(binary: GoBinary, log=sys.stderr) -> Path:
    """ensure_built, preparing the scratch module first for the k8s.io/kubernetes binaries."""
    if binary.module_dir.name.startswith("world-gomod-kubernetes"):
        return ensure_built(binary, log=log, prepare=_kubernetes_module)
    return ensure_built(binary, log=log)


def main(argv: list[str] | None = None) -> int:
    for name in argv or list(ALL):
        t0 = time.monotonic()
        print(build(ALL[name]), f"({time.monotonic() - t0:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
