"""The registry of Kubeflow training kinds podsweeper may touch.

Adding a kind is one entry in TRAINING_KINDS; everything else (ownership and labels in
`ownership.py`, the API paths, the RBAC test) reads this table.
"""

from __future__ import annotations

from dataclasses import dataclass

GROUP = "kubeflow.org"


@dataclass(frozen=True)
class TrainingKind:
    """One training job kind of the Kubeflow Training Operator."""

    kind: str
    plural: str
    replica_specs_key: str
    versions: tuple[str, ...] = ("v1",)
    # restartPolicy a replica gets when its spec names none.
    default_restart_policy: str = "Never"
    # MPIJob still honours its deprecated top-level spec.cleanPodPolicy.
    top_level_clean_pod_policy: bool = False

    @property
    def operator_name(self) -> str:
        """Value of `training.kubeflow.org/operator-name` on this kind's pods."""
        return f"{self.kind.lower()}-controller"

    @property
    def preferred_version(self) -> str:
        return self.versions[0]


TRAINING_KINDS: tuple[TrainingKind, ...] = (
    TrainingKind("PyTorchJob", "pytorchjobs", "pytorchReplicaSpecs", default_restart_policy="OnFailure"),
    TrainingKind("TFJob", "tfjobs", "tfReplicaSpecs"),
    TrainingKind(
        "MPIJob",
        "mpijobs",
        "mpiReplicaSpecs",
        versions=("v1", "v2beta1"),
        top_level_clean_pod_policy=True,
    ),
    TrainingKind("XGBoostJob", "xgboostjobs", "xgbReplicaSpecs"),
    TrainingKind("PaddleJob", "paddlejobs", "paddleReplicaSpecs", default_restart_policy="OnFailure"),
    TrainingKind("JAXJob", "jaxjobs", "jaxReplicaSpecs"),
)

BY_KIND: dict[str, TrainingKind] = {k.kind: k for k in TRAINING_KINDS}
BY_OPERATOR_NAME: dict[str, TrainingKind] = {k.operator_name: k for k in TRAINING_KINDS}


def lookup(api_version: str | None, kind: str | None) -> TrainingKind | None:
    """The training kind for an apiVersion/kind pair, or None if it is not one of ours."""
    if not api_version or not kind:
        return None
    group, _, version = api_version.rpartition("/")
    found = BY_KIND.get(kind)
    if found is None or group != GROUP or version not in found.versions:
        return None
    return found
