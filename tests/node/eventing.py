"""Knative Eventing on the real node: the eventing controller as in tests/support/knative, but the
pods it generates (the ApiServerSource's receive adapter, the PingSource dispatcher `mtping`) run
on the node's kubelet from images of their own, not as processes of the host.

The images: scratch with the static binary the tests already build from Eventing's Go module
(v0.49.2: `apiserver_receive_adapter`, `mtping`), user 65532 (the generated pods run as
non-root), tagged with Eventing's version, so the kubelet's default pull policy for them is
IfNotPresent and the node, which has no registry, uses the imported one. The controller is told
the adapter's image by APISERVER_RA_IMAGE, as its Deployment tells it; the dispatcher's image is
the one in Eventing's `pingsource-mt-adapter` Deployment, written with the tag.

The generated pods then need what a cluster gives them: their ServiceAccount token (the admission
plugin), the API through the `kubernetes` Service and the sink's name resolved (cluster DNS):
NodeWorld(cluster_dns=True).
"""

from __future__ import annotations

import sys
from typing import TextIO

from tests.node.build import binary_image
from tests.node.node import RealNode
from tests.support.adapter.ping import MTPING
from tests.support.controlplane.build import RECEIVE_ADAPTER, ensure_built
from tests.support.controlplane.versions import ADAPTER_EVENTING_VERSION
from tests.support.knative.eventing import MTPING_IMAGE, RECEIVE_ADAPTER_IMAGE, Eventing

USER = "65532"
ADAPTER_IMAGE = f"{RECEIVE_ADAPTER_IMAGE}:{ADAPTER_EVENTING_VERSION}"
DISPATCHER_IMAGE = f"{MTPING_IMAGE}:{ADAPTER_EVENTING_VERSION}"


def import_images(node: RealNode, log: TextIO = sys.stderr) -> None:
    """The adapter's and the dispatcher's images, built on first use, into the node's containerd."""
    for image, binary in ((ADAPTER_IMAGE, RECEIVE_ADAPTER), (DISPATCHER_IMAGE, MTPING)):
        path = ensure_built(binary, log=log)
        archive = binary_image(image, path, key=f"{binary.name}-{binary.version}", log=log, user=USER)
        node._ctr(["images", "import", "--snapshotter", "overlayfs", str(archive)], timeout=300)


class NodeEventing(Eventing):
    """Eventing whose generated pods the real node runs."""

    stand_ins = False

    def __init__(self, control_plane, node: RealNode, **kwargs):
        super().__init__(control_plane, **kwargs)
        self.node = node
        self.adapter_image, self.mtping_image = ADAPTER_IMAGE, DISPATCHER_IMAGE

    def start(self) -> NodeEventing:
        import_images(self.node, self.log)
        super().start()
        return self
