"""The real Knative CRDs, read from the Go modules knative.dev/serving and knative.dev/eventing.

Knative 1.22 = serving v0.49.x + eventing v0.49.x (both pin the same knative.dev/pkg).
Eventing is v0.49.2, the release the e2e tests' receive adapter is built from; the module
proxy reachable here serves serving up to v0.49.1 of that line (v0.49.2 answers 403).

No Knative webhook runs in the test control plane, so only the CRDs' OpenAPI schemas apply;
the conversion webhooks some CRDs name (PingSource v1beta2 <-> v1, ...) are replaced by
``strategy: None``: the objects we apply are at the storage version and never need converting.
"""

from __future__ import annotations

import copy
from pathlib import Path

from tests.support.controlplane.manifests import go_module_dir, load_yaml
from tests.support.controlplane.versions import ADAPTER_EVENTING_VERSION

SERVING_MODULE = "knative.dev/serving"
SERVING_VERSION = "v0.49.1"
SERVING_CRD_DIR = "config/core/300-resources"
EVENTING_MODULE = "knative.dev/eventing"
EVENTING_VERSION = ADAPTER_EVENTING_VERSION  # v0.49.2 = Knative 1.22.2
EVENTING_CRD_DIR = "config/core/resources"


def knative_crds() -> list[dict]:
    """Every CRD of Knative Serving and Eventing core, conversion webhooks removed."""
    dirs = [
        go_module_dir(SERVING_MODULE, SERVING_VERSION) / SERVING_CRD_DIR,
        go_module_dir(EVENTING_MODULE, EVENTING_VERSION) / EVENTING_CRD_DIR,
    ]
    crds = []
    for directory in dirs:
        for path in sorted(Path(directory).glob("*.yaml")):
            for doc in load_yaml(path):
                if doc.get("kind") == "CustomResourceDefinition":
                    crds.append(without_conversion_webhook(doc))
    return crds


def without_conversion_webhook(crd: dict) -> dict:
    crd = copy.deepcopy(crd)
    if (crd["spec"].get("conversion") or {}).get("strategy") == "Webhook":
        crd["spec"]["conversion"] = {"strategy": "None"}
    return crd


def crds_for(objects: list[dict], crds: list[dict]) -> list[dict]:
    """The CRDs that define the kinds of these objects (group + kind)."""
    wanted = {(o["apiVersion"].rpartition("/")[0], o["kind"]) for o in objects}
    return [c for c in crds if (c["spec"]["group"], c["spec"]["names"]["kind"]) in wanted]
