"""Versions of the control-plane components built from Go modules (the cache key)."""

KUBERNETES_VERSION = "v1.36.3"
# The etcd that k8s.io/kubernetes v1.36.3 itself requires, so one module graph builds both.
ETCD_VERSION = "v3.6.8"
ADAPTER_EVENTING_VERSION = "v0.49.2"

# Where the real Kubeflow training CRDs come from: the operator's own Go module, fetched with
# `go mod download` (the Go module proxy is reachable, GitHub release assets are not).
TRAINING_OPERATOR_MODULE = "github.com/kubeflow/training-operator"
# v1.9.4: the operator the test world runs (tests/world), the first on Kubernetes 0.36.
TRAINING_OPERATOR_VERSION = "v1.9.4"
TRAINING_OPERATOR_CRD_DIR = "manifests/base/crds"
