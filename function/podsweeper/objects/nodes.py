"""Nodes: only whether one is Ready, for the stuck-terminating rule (a pod whose node is
gone or not Ready never finishes terminating by itself)."""

from __future__ import annotations

from podsweeper.errors import BadEvent
from podsweeper.model import Node, NodeReady
from podsweeper.objects.base import Condition, ObjectMeta, Schema, validate_json


class NodeStatus(Schema):
    conditions: list[Condition] | None = None


class NodeObject(Schema):
    metadata: ObjectMeta
    status: NodeStatus | None = None


def decode_node(body: bytes | str) -> Node:
    """A node's readiness from the JSON the API sent."""
    obj = validate_json(NodeObject, body, "node")
    ready = next((c for c in (obj.status or NodeStatus()).conditions or () if c.type == "Ready"), None)
    if ready is None:
        return Node(obj.metadata.name, NodeReady.UNKNOWN)
    try:
        status = NodeReady(ready.status)
    except ValueError:
        raise BadEvent(f"node {obj.metadata.name}: Ready condition status {ready.status[:40]!r}") from None
    return Node(obj.metadata.name, status, ready.lastTransitionTime)
