"""Versions of the control-plane components built from Go modules (the cache key)."""

KUBERNETES_VERSION = "v1.36.3"
# The etcd that k8s.io/kubernetes v1.36.3 itself requires, so one module graph builds both.
ETCD_VERSION = "v3.6.8"
ADAPTER_EVENTING_VERSION = "v0.49.2"

# Where the real Kubeflow training CRDs come from: the operator's own Go module, fetched with
# `go mod download` (the Go module proxy is reachable, GitHub release assets are not).
TRAINING_OPERATOR_MODULE = "github.com/kubeflow/training-operator"
# v1.9.4: the operator the test world runs (tests/support/world), the first on Kubernetes 0.36.
TRAINING_OPERATOR_VERSION = "v1.9.4"
TRAINING_OPERATOR_CRD_DIR = "manifests/base/crds"

# Kubeflow Trainer v2 and JobSet CRDs, read from their Go modules too: the shipped Knative
# ApiServerSource watches TrainJobs and JobSets, and the receive adapter exits when a watched
# resource is not served. v2.3.0 pins JobSet v0.12.0 (tests/support/world runs both controllers).
TRAINER_MODULE = "github.com/kubeflow/trainer/v2"
TRAINER_VERSION = "v2.3.0"
TRAINER_CRD_DIR = "manifests/base/crds"  # trainjobs, trainingruntimes, clustertrainingruntimes
JOBSET_MODULE = "sigs.k8s.io/jobset"
JOBSET_VERSION = "v0.12.0"
# jobsets; the kustomize patches (a conversion webhook for the one version) are not applied.
JOBSET_CRD_DIR = "config/components/crd/bases"

# The standalone mpi-operator (MPIJob kubeflow.org/v2beta1), an opt-in world profile
# (World(mpi_operator=True)): its mpijobs CRD replaces the training operator's v1 one, since
# both are named mpijobs.kubeflow.org.
MPI_OPERATOR_MODULE = "github.com/kubeflow/mpi-operator"
MPI_OPERATOR_VERSION = "v0.8.0"
MPI_OPERATOR_CRD_DIR = "manifests/base"  # kubeflow.org_mpijobs.yaml (v2beta1 only)

# Volcano, the gang scheduler of the seed's cluster: an opt-in world profile
# (World(volcano=True)). CRDs (PodGroup, Queue, ...) and the Helm chart's scheduler conf are
# read from its Go module; its scheduler and controller manager are built from it.
VOLCANO_MODULE = "volcano.sh/volcano"
VOLCANO_VERSION = "v1.10.0"
VOLCANO_CRD_DIRS = ("config/crd/volcano/bases", "config/crd/jobflow/bases")  # apiextensions v1
