"""The bench's door to the test harness's control plane and Knative adapter.

Apart from bench/harness.py, the only bench module that imports `tests`; its documented
entry points (docs/development.md, "Shared pieces"):

- `tests.support.controlplane.launcher.ControlPlane`: etcd + kube-apiserver with the
  function's RBAC and its users; `tests.support.controlplane.build`: Go binaries built once
  into the cache (the receive adapter, figure 8's floor).
- `tests.support.adapter.launcher`: Knative's receive adapter run from the shipped ApiServerSource.
- `tests.support.stack.players.Play`: the training operator and kubelet played with the admin
  client (`Play(admin, namespace, node=None)`).
- `tests.support.bulk.RawApi`: many objects at once by raw HTTPS (set-ups of 50,000 pods).

Importing it loads the kubernetes client: figures that need no control plane do not.
"""

from __future__ import annotations

from tests.support.adapter.launcher import ReceiveAdapter, install_source_rbac, source_config
from tests.support.bulk import RawApi
from tests.support.controlplane.build import RECEIVE_ADAPTER, GoBinary, ensure_built, source_digest
from tests.support.controlplane.launcher import ControlPlane
from tests.support.stack.players import Play

__all__ = [
    "RECEIVE_ADAPTER",
    "ControlPlane",
    "GoBinary",
    "Play",
    "RawApi",
    "ReceiveAdapter",
    "ensure_built",
    "install_source_rbac",
    "source_config",
    "source_digest",
]
