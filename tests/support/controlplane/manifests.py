"""Install what the function expects to find in a cluster: the Kubeflow CRDs and its RBAC.

The CRDs are the training operator's real ones, read from its Go module, so tests exercise
the same schemas (defaulting, pruning, validation) as a production cluster. The RBAC is
knative/function/rbac.yaml itself, so the integration tests check the manifest we ship.

Objects are created through the Python kubernetes client with ``_preload_content=False``:
the CRD schemas are ~600 KB each and turning the responses into client models is slow.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.support.controlplane.versions import (
    JOBSET_CRD_DIR,
    JOBSET_MODULE,
    JOBSET_VERSION,
    MPI_OPERATOR_CRD_DIR,
    MPI_OPERATOR_MODULE,
    MPI_OPERATOR_VERSION,
    TRAINER_CRD_DIR,
    TRAINER_MODULE,
    TRAINER_VERSION,
    TRAINING_OPERATOR_CRD_DIR,
    TRAINING_OPERATOR_MODULE,
    TRAINING_OPERATOR_VERSION,
    VOLCANO_CRD_DIRS,
    VOLCANO_MODULE,
    VOLCANO_VERSION,
)

REPO_ROOT = Path(__file__).resolve().parents[3]
FUNCTION_RBAC = REPO_ROOT / "knative" / "function" / "rbac.yaml"
# What RBAC cannot narrow (which ConfigMaps, which fields of a job, which Jobs and pods): applied
# with the RBAC, so every test of the function runs under it as a cluster would.
FUNCTION_ADMISSION = REPO_ROOT / "knative" / "function" / "admission-policy.yaml"

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class ManifestError(RuntimeError):
    """CRDs could not be fetched or did not become Established."""


def go_module_dir(module: str, version: str) -> Path:
    """Download (or find in the module cache) a Go module and return its directory."""
    go = shutil.which("go")
    if go is None:
        raise ManifestError(f"go is not on PATH: needed to fetch {module}@{version}")
    # Run outside any module and without the caller's GOFLAGS (e.g. -mod=mod), which
    # `go mod download` rejects outside a module.
    env = {**os.environ, "GOFLAGS": "", "GO111MODULE": "on"}
    proc = subprocess.run(
        [go, "mod", "download", "-json", f"{module}@{version}"],
        cwd=tempfile.gettempdir(),
        env=env,
        capture_output=True,
        text=True,
    )
    try:
        info = json.loads(proc.stdout)
    except ValueError:
        info = {}
    if proc.returncode != 0 or "Dir" not in info:
        raise ManifestError(
            f"go mod download {module}@{version} failed:\n{info.get('Error', '')}{proc.stderr}"
        )
    return Path(info["Dir"])


def load_yaml(path: Path) -> list[dict]:
    with path.open() as f:
        return [doc for doc in yaml.load_all(f, Loader=_Loader) if doc]


def _module_crds(module: str, version: str, subdir: str) -> list[dict]:
    crd_dir = go_module_dir(module, version) / subdir
    docs = [doc for path in sorted(crd_dir.glob("*.yaml")) for doc in load_yaml(path)]
    crds = [d for d in docs if d.get("kind") == "CustomResourceDefinition"]
    if not crds:
        raise ManifestError(f"no CustomResourceDefinitions under {crd_dir}")
    return crds


def training_crds() -> list[dict]:
    """The training operator's CRDs (PyTorchJob, TFJob, MPIJob, XGBoostJob, PaddleJob, JAXJob)."""
    return _module_crds(TRAINING_OPERATOR_MODULE, TRAINING_OPERATOR_VERSION, TRAINING_OPERATOR_CRD_DIR)


def trainer_crds() -> list[dict]:
    """Kubeflow Trainer v2's CRDs (TrainJob, TrainingRuntime, ClusterTrainingRuntime)."""
    return _module_crds(TRAINER_MODULE, TRAINER_VERSION, TRAINER_CRD_DIR)


def jobset_crds() -> list[dict]:
    """JobSet's CRD (jobsets.jobset.x-k8s.io, v1alpha2 only: no conversion webhook needed)."""
    return _module_crds(JOBSET_MODULE, JOBSET_VERSION, JOBSET_CRD_DIR)


def mpi_operator_crds() -> list[dict]:
    """The mpi-operator's CRD (mpijobs.kubeflow.org, v2beta1 only)."""
    return _module_crds(MPI_OPERATOR_MODULE, MPI_OPERATOR_VERSION, MPI_OPERATOR_CRD_DIR)


def all_crds(mpi_operator: bool = False) -> list[dict]:
    """Every CRD a test cluster serves: Kubeflow v1 training kinds, Trainer v2, JobSet, and
    Volcano's PodGroup (what podsweeper may delete of a finished TrainJob: its RBAC and the
    admission policy are judged on a real server; Volcano's other CRDs only in its world).

    `mpi_operator`: mpijobs.kubeflow.org is the mpi-operator's (v2beta1), not the training
    operator's (v1); a cluster can serve only one CRD of that name."""
    crds = training_crds() + trainer_crds() + jobset_crds() + podgroup_crds()
    if not mpi_operator:
        return crds
    mpi = mpi_operator_crds()
    names = {crd["metadata"]["name"] for crd in mpi}
    return [crd for crd in crds if crd["metadata"]["name"] not in names] + mpi


def podgroup_crds() -> list[dict]:
    """Volcano's PodGroup CRD alone (scheduling.volcano.sh/v1beta1)."""
    return [crd for crd in volcano_crds() if crd["metadata"]["name"] == "podgroups.scheduling.volcano.sh"]


def volcano_crds() -> list[dict]:
    """Volcano's CRDs: scheduling (PodGroup, Queue), batch, bus, nodeinfo and jobflow. Only
    the PodGroup's is in all_crds(): World(volcano=True) installs the rest, before the
    operator starts."""
    return [
        crd for subdir in VOLCANO_CRD_DIRS for crd in _module_crds(VOLCANO_MODULE, VOLCANO_VERSION, subdir)
    ]


def install_crds(api: client.ApiClient, crds: list[dict], timeout: float = 30.0) -> None:
    """Create the CRDs (tolerating AlreadyExists) and wait until all are Established."""
    ext = client.ApiextensionsV1Api(api)
    # Sequential: creating them in parallel measured no faster, the server establishes
    # them one after another either way (~0.3 s each).
    for crd in crds:
        try:
            ext.create_custom_resource_definition(crd, _preload_content=False)
        except ApiException as e:
            if e.status != 409:
                raise
    wanted = {crd["metadata"]["name"] for crd in crds}
    deadline = time.monotonic() + timeout
    while True:
        listing = json.loads(ext.list_custom_resource_definition(_preload_content=False).data)
        established = {
            item["metadata"]["name"]
            for item in listing["items"]
            if any(
                c["type"] == "Established" and c["status"] == "True"
                for c in (item.get("status") or {}).get("conditions") or []
            )
        }
        if wanted <= established:
            return
        if time.monotonic() > deadline:
            raise ManifestError(f"CRDs not Established after {timeout}s: {sorted(wanted - established)}")
        time.sleep(0.2)  # each poll lists ~3.5 MB of schemas; don't starve the server's CPU


def _creator(api: client.ApiClient, kind: str):
    """The typed create call for the kinds our RBAC manifests use."""
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    admission = client.AdmissionregistrationV1Api(api)
    table = {
        "Namespace": lambda o: core.create_namespace(o, _preload_content=False),
        "ServiceAccount": lambda o: core.create_namespaced_service_account(
            o["metadata"]["namespace"], o, _preload_content=False
        ),
        "ClusterRole": lambda o: rbac.create_cluster_role(o, _preload_content=False),
        "ClusterRoleBinding": lambda o: rbac.create_cluster_role_binding(o, _preload_content=False),
        "ValidatingAdmissionPolicy": lambda o: admission.create_validating_admission_policy(
            o, _preload_content=False
        ),
        "ValidatingAdmissionPolicyBinding": lambda o: admission.create_validating_admission_policy_binding(
            o, _preload_content=False
        ),
        "Role": lambda o: rbac.create_namespaced_role(o["metadata"]["namespace"], o, _preload_content=False),
        "RoleBinding": lambda o: rbac.create_namespaced_role_binding(
            o["metadata"]["namespace"], o, _preload_content=False
        ),
    }
    if kind not in table:
        raise ManifestError(f"don't know how to create a {kind}; extend manifests._creator")
    return table[kind]


def apply_manifest(api: client.ApiClient, path: Path) -> None:
    """Create every object in a YAML file, in order, tolerating AlreadyExists."""
    for obj in load_yaml(path):
        try:
            _creator(api, obj["kind"])(obj)
        except ApiException as e:
            if e.status != 409:
                raise
