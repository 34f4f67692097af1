"""Namespaces: only their name, uid and annotations (a namespace's podsweeper policy)."""

from __future__ import annotations

from podsweeper.model import Namespace
from podsweeper.objects.base import ObjectMeta, Schema, validate_json

API_VERSION, KIND = "v1", "Namespace"


class NamespaceObject(Schema):
    apiVersion: str = API_VERSION
    kind: str = KIND
    metadata: ObjectMeta


def decode_namespace(body: bytes | str) -> Namespace:
    """A Namespace from the JSON the API (or a recorded stream) holds."""
    obj = validate_json(NamespaceObject, body, "namespace")
    return Namespace(obj.metadata.name, obj.metadata.uid, dict(obj.metadata.annotations or {}))


def is_namespace(data: object) -> bool:
    """Whether a recorded event's data is a Namespace object (before it is decoded)."""
    return isinstance(data, dict) and data.get("apiVersion") == API_VERSION and data.get("kind") == KIND
