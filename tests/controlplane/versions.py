"""Versions of the control-plane components built from Go modules (the cache key)."""

KUBERNETES_VERSION = "v1.36.3"
# The etcd that k8s.io/kubernetes v1.36.3 itself requires, so one module graph builds both.
ETCD_VERSION = "v3.6.8"
ADAPTER_EVENTING_VERSION = "v0.49.2"
