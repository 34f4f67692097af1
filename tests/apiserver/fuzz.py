"""Malformed and hostile HTTP requests for the served function, generated from one seed.

Every request starts from a real ApiServerSource / PingSource event about an object that
exists in the test namespace (so a request that survives the mutations reaches the API and
reads real state), then breaks one or two things: headers, content type, method and path,
body encoding, JSON syntax, nesting depth, sizes, the type of any single field of a pod or a
job, names no Kubernetes object can have, Reference-mode payloads, structured mode.
"""

from __future__ import annotations

import base64
import copy
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass

from tests.fixtures import builders, facts

CE_HEADERS = ("ce-id", "ce-source", "ce-type", "ce-specversion", "ce-time", "ce-subject")
EVENT_TYPES = tuple(
    f"dev.knative.apiserver.{mode}.{verb}"
    for mode in ("resource", "ref")
    for verb in ("add", "update", "delete")
) + ("dev.knative.sources.ping",)
BAD_TYPES = (
    "",
    "dev.knative.apiserver.resource.",
    "dev.knative.apiserver.resource.ADD",
    "dev.knative.apiserver.resource.add.extra",
    "dev.knative.apiserver.ref.",
    "dev.knative.sources",
    "com.example.unknown",
    "dev.knative.apiserver.resource.patch",
    "x" * 300,
    "dev.knative.apiserver.resource.add\x00",
    "dev.knative.apiserver.ref.delete ",
)
CONTENT_TYPES = (
    None,
    "text/plain",
    "application/xml",
    "application/json; charset=latin-1",
    "application/cloudevents+json",
    "application/cloudevents-batch+json",
    "multipart/form-data; boundary=x",
    "application/x-www-form-urlencoded",
    "application/json\x00",
    "application/octet-stream",
    "*/*",
    "application/json" * 50,
)
# Names no Kubernetes object can have; some would change the URL the client builds.
HOSTILE_NAMES = (
    "",
    ".",
    "..",
    "../..",
    "a/b",
    "a%2Fb",
    "a b",
    "a\nb",
    "a\x00b",
    "a?b=c",
    "a#b",
    "ABC",
    "jöb-ü",
    "名前",
    "\u202eevil",
    "zero\u200bwidth",
    "emoji-🚀",
    "x" * 64,
    "x" * 254,
    "-leading",
    "trailing-",
    "a..b",
    "a_b",
    "%00",
    "\\",
    "'; DROP TABLE pods; --",
    "$(rm -rf /)",
    "`id`",
    "{{7*7}}",
    "${jndi:ldap://x}",
    "__import__('os').system('id')",
)
WRONG_VALUES = (
    None,
    True,
    False,
    0,
    -1,
    1.5,
    2**64,
    -(2**63),
    "",
    "x",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ☃",
    [],
    [1, "a"],
    {},
    {"a": {"b": []}},
    "\u0000",
    "x" * 5000,
    1e308,
    "true",
    "2026-13-45T99:99:99Z",
)
RAW_JSON_TOKENS = (
    "NaN",
    "Infinity",
    "-Infinity",
    "1e999",
    "9" * 5000,
    '"\\ud800"',
    '"\\udfff\\ud800"',
    "0x10",
    "+1",
    ".5",
    "01",
    "tru",
    "nul",
    "'single'",
    "undefined",
)


@dataclass
class Request:
    category: str
    method: str
    path: str
    headers: list[tuple[str, bytes | str]]
    body: bytes
    names_seeded: bool = False  # a payload that names a seeded pod or job


def _paths(obj, prefix=()) -> Iterator[tuple]:
    """Every path into a JSON value (dict keys and list indices), depth-first."""
    yield prefix
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key == "managedFields":
                yield prefix + (key,)
                continue
            yield from _paths(value, prefix + (key,))
    elif isinstance(obj, list):
        for index, value in enumerate(obj):
            yield from _paths(value, prefix + (index,))


def _parent(obj, path):
    """The container holding path's last key, inside obj."""
    for key in path[:-1]:
        obj = obj[key]
    return obj


def _set(obj, path, value):
    if not path:
        return value
    obj = copy.deepcopy(obj)
    _parent(obj, path)[path[-1]] = value
    return obj


def _delete(obj, path):
    if not path:
        return None
    obj = copy.deepcopy(obj)
    del _parent(obj, path)[path[-1]]
    return obj


def binary(raw_event: dict, body: bytes | None = None) -> tuple[list, bytes]:
    """Binary content mode, as ApiServerSource sends it."""
    headers = [("Content-Type", "application/json"), ("Kn-Namespace", "podsweeper")]
    for key, value in raw_event.items():
        if key not in ("data", "datacontenttype"):
            headers.append((f"ce-{key}", str(value)))
    data = json.dumps(raw_event.get("data")).encode() if body is None else body
    return headers, data


def _replace_header(headers, name, value):
    out = [(k, v) for k, v in headers if k.lower() != name.lower()]
    if value is not None:
        out.append((name, value))
    return out


class Generator:
    """Deterministic stream of hostile requests about the objects seeded in `namespace`."""

    def __init__(self, namespace: str, seeded: dict, body_limit: int, seed: int = 20261101):
        self.rng = random.Random(seed)
        self.namespace = namespace
        self.body_limit = body_limit
        # seeded: {"jobs": [raw job], "pods": [raw pod]} as the API returned them
        self.jobs, self.pods = seeded["jobs"], seeded["pods"]
        self.pod_paths = [list(_paths(p)) for p in self.pods]
        self.job_paths = [list(_paths(j)) for j in self.jobs]

    # -- valid starting points ------------------------------------------------------------
    def _lying_job(self, job: dict) -> dict:
        """The job as a payload may claim it: finished, deleted, another uid, other policy."""
        j = copy.deepcopy(job)
        claim = self.rng.choice(["succeeded", "failed", "uid", "policy", "plain", "suspended"])
        if claim in ("succeeded", "failed"):
            j["status"] = {"conditions": [{"type": claim.title(), "status": "True"}]}
        elif claim == "uid":
            j["metadata"]["uid"] = "not-the-real-uid"
        elif claim == "policy":
            j.setdefault("spec", {}).setdefault("runPolicy", {})["cleanPodPolicy"] = "All"
            j["status"] = {"conditions": [{"type": "Succeeded", "status": "True"}]}
        elif claim == "suspended":
            j["status"] = {"conditions": [{"type": "Suspended", "status": "True"}]}
        return j

    def _lying_pod(self, pod: dict) -> dict:
        p = copy.deepcopy(pod)
        claim = self.rng.choice(["crashloop", "terminating", "other-owner-uid", "no-skip", "plain"])
        if claim == "crashloop":
            p["status"] = {
                "phase": "Running",
                "containerStatuses": [
                    builders.container_status(
                        state="waiting", reason="CrashLoopBackOff", restarts=999, last_exit=1
                    )
                ],
            }
        elif claim == "terminating":
            p["metadata"]["deletionTimestamp"] = "2026-11-01T10:00:00Z"
        elif claim == "other-owner-uid":
            for ref in p["metadata"].get("ownerReferences") or ():
                ref["uid"] = "some-deleted-job-uid"
            p["status"] = {
                "phase": "Running",
                "containerStatuses": [
                    builders.container_status(state="waiting", reason="CrashLoopBackOff", restarts=50)
                ],
            }
        elif claim == "no-skip":
            p["metadata"]["annotations"] = {}
        return p

    def _base(self) -> tuple[dict, str]:
        """A valid event about a seeded object (or a ping); returns (event, kind of object)."""
        at = builders.at(self.rng.randint(0, 10_000))
        choice = self.rng.random()
        if choice < 0.08:
            return builders.ping(at, event_id=f"fz-{self.rng.getrandbits(40):x}"), "ping"
        verb = self.rng.choice(["add", "update", "delete"])
        mode = "ref" if self.rng.random() < 0.2 else "resource"
        if choice < 0.5:
            obj, what = self._lying_job(self.rng.choice(self.jobs)), "job"
        else:
            obj, what = self._lying_pod(self.rng.choice(self.pods)), "pod"
        return builders.event(verb, obj, at, mode=mode, event_id=f"fz-{self.rng.getrandbits(40):x}"), what

    # -- request families ------------------------------------------------------------------
    def hostile_valid(self) -> Request:
        """Well-formed events that lie about seeded objects: must change nothing."""
        raw, _ = self._base()
        return Request("valid event with lying payload", "POST", "/", *binary(raw), names_seeded=True)

    def header_garbage(self) -> Request:
        raw, _ = self._base()
        headers, body = binary(raw)
        action = self.rng.randrange(7)
        if action == 0:
            headers = _replace_header(headers, self.rng.choice(CE_HEADERS[:4]), None)
        elif action == 1:
            value = self.rng.choice(["", "x" * 10_000, "ünïcødé".encode(), b"\xff\xfe\x00", "0", "{}", "\t"])
            headers = _replace_header(headers, self.rng.choice(CE_HEADERS), value)
        elif action == 2:
            headers = _replace_header(headers, "ce-type", self.rng.choice(BAD_TYPES))
        elif action == 3:
            headers = _replace_header(
                headers,
                "ce-time",
                self.rng.choice(
                    ["yesterday", "2026-13-45T99:99:99Z", "99999-01-01T00:00:00Z", "-1", "", "2026-11-01"]
                ),
            )
        elif action == 4:
            headers = _replace_header(
                headers, "ce-specversion", self.rng.choice(["0.3", "2.0", "", "1.0.0", "1"])
            )
        elif action == 5:
            headers = headers + [("ce-type", self.rng.choice(EVENT_TYPES))] + [("ce-id", "second")]
        else:
            headers = headers + [(f"ce-x{i}", "y" * 100) for i in range(self.rng.choice([50, 120]))]
        return Request("bad CloudEvent headers", "POST", "/", headers, body)

    def content_type(self) -> Request:
        raw, _ = self._base()
        headers, body = binary(raw)
        return Request(
            "wrong content type",
            "POST",
            "/",
            _replace_header(headers, "Content-Type", self.rng.choice(CONTENT_TYPES)),
            body,
        )

    def method_and_path(self) -> Request:
        raw, _ = self._base()
        headers, body = binary(raw)
        method = self.rng.choice(["GET", "PUT", "DELETE", "PATCH", "OPTIONS", "POST", "HEAD"])
        path = self.rng.choice(
            [
                "/",
                "/x",
                "/../../etc/passwd",
                "/%00",
                "/metrics",
                "/healthz",
                "/" + "a" * 5000,
                "/?a=" + "b" * 1000,
                "//",
                "/%2e%2e/",
                "/cloudevent",
            ]
        )
        return Request("other methods and paths", method, path, headers, body if method != "HEAD" else b"")

    def truncated(self) -> Request:
        raw, _ = self._base()
        headers, body = binary(raw)
        cut = self.rng.randrange(0, max(1, len(body)))
        return Request("truncated JSON", "POST", "/", headers, body[:cut])

    def nested(self) -> Request:
        raw, _ = self._base()
        depth = self.rng.choice([100, 1000, 5000, 20_000, 100_000])
        shape = self.rng.randrange(4)
        if shape == 0:
            text = "[" * depth + "]" * depth
        elif shape == 1:
            text = '{"a":' * depth + "1" + "}" * depth
        else:  # deep structure inside an otherwise valid object
            data = raw.get("data") if isinstance(raw.get("data"), dict) else {}
            inner = "[" * depth + "]" * depth if shape == 2 else '{"a":' * depth + "null" + "}" * depth
            data = dict(data)
            key = self.rng.choice(["metadata", "status", "spec", "x"])
            text = json.dumps({**data, key: "__INNER__"}).replace('"__INNER__"', inner)
        headers, _ = binary(raw)
        return Request("deeply nested JSON", "POST", "/", headers, text.encode())

    def huge(self) -> Request:
        raw, _ = self._base()
        data = raw.get("data") if isinstance(raw.get("data"), dict) else {}
        size = self.rng.choice(
            [10_000, 100_000, self.body_limit - 2000, self.body_limit + 1, self.body_limit * 3]
        )
        paths = [p for p in _paths(data) if p]
        path = self.rng.choice(paths) if paths else ("x",)
        try:
            mutated = _set(data, path, "ß" * (size // 2))
        except (KeyError, IndexError, TypeError):
            mutated = {"x": "ß" * (size // 2)}
        headers, body = binary(raw, json.dumps(mutated, ensure_ascii=False).encode())
        return Request("huge strings and bodies", "POST", "/", headers, body)

    def wrong_type(self) -> Request:
        """One field of a real pod or job (every path, in turn) gets a value of another type."""
        raw, _ = self._base()
        if isinstance(raw.get("data"), dict) and "metadata" in raw["data"]:
            obj = raw["data"]
            path = self.rng.choice(list(_paths(obj)))
            value = self.rng.choice(WRONG_VALUES)
            mutated = _delete(obj, path) if self.rng.random() < 0.15 else _set(obj, path, value)
            headers, body = binary(raw, json.dumps(mutated).encode())
        else:
            headers, body = binary(raw, json.dumps(self.rng.choice(WRONG_VALUES)).encode())
        return Request("wrong type in a field", "POST", "/", headers, body)

    def raw_tokens(self) -> Request:
        raw, _ = self._base()
        headers, body = binary(raw)
        text = body.decode()
        token = self.rng.choice(RAW_JSON_TOKENS)
        # Replace the first JSON string value after a random key with a raw token.
        marker = self.rng.choice(
            ['"phase": ', '"name": ', '"uid": ', '"restartCount": ', '"status": ', '": ']
        )
        at = text.find(marker)
        if at >= 0:
            start = at + len(marker)
            end = start
            depth = 0
            while end < len(text) and not (depth == 0 and text[end] in ",}]"):
                depth += text[end] in "[{"
                depth -= text[end] in "]}"
                end += 1
            text = text[:start] + token + text[end:]
        else:
            text = token
        return Request("invalid JSON tokens and numbers", "POST", "/", headers, text.encode())

    def encoding(self) -> Request:
        raw, _ = self._base()
        headers, body = binary(raw)
        choice = self.rng.randrange(5)
        if choice == 0:
            body = body.decode().encode("utf-16")
        elif choice == 1:
            body = b"\xef\xbb\xbf" + body
        elif choice == 2:
            body = bytes(self.rng.getrandbits(8) for _ in range(self.rng.choice([1, 64, 4096])))
        elif choice == 3:
            at = self.rng.randrange(max(1, len(body)))
            body = body[:at] + b"\xc3\x28\xff" + body[at:]
        else:
            body = json.dumps(json.loads(body), ensure_ascii=False).encode("latin-1", "replace")
        return Request("broken encodings", "POST", "/", headers, body)

    def not_an_object(self) -> Request:
        raw, _ = self._base()
        headers, _ = binary(raw)
        body = self.rng.choice(
            [
                b"[]",
                b"[1,2]",
                b'"pod"',
                b"42",
                b"null",
                b"true",
                b"",
                b" ",
                b"{}",
                b'{"kind": "Pod"}',
                b'{"metadata": null}',
                b'{"apiVersion": 1, "kind": [], "metadata": {}}',
            ]
        )
        return Request("JSON that is not a Kubernetes object", "POST", "/", headers, body)

    def impossible_names(self) -> Request:
        """Names no Kubernetes object has, in every place a name is read (they reach the API)."""
        raw, what = self._base()
        data = copy.deepcopy(raw.get("data"))
        name = self.rng.choice(HOSTILE_NAMES)
        if not isinstance(data, dict) or not data:
            data = {"kind": "Pod", "apiVersion": "v1", "name": name, "namespace": self.namespace}
        elif "metadata" not in data:  # Reference mode
            data[self.rng.choice(["name", "namespace"])] = name
        else:
            place = self.rng.randrange(4)
            meta = data["metadata"]
            if place == 0:
                meta["name"] = name
            elif place == 1:
                meta["namespace"] = name
            elif place == 2 and meta.get("ownerReferences"):
                meta["ownerReferences"][0]["name"] = name
            else:
                (meta.setdefault("labels", {}) or {})[facts.JOB_NAME_LABEL] = name
            if what == "pod":  # make it a crash-loop candidate so a pass really runs
                data["status"] = {
                    "phase": "Running",
                    "containerStatuses": [
                        builders.container_status(state="waiting", reason="CrashLoopBackOff", restarts=999)
                    ],
                }
        headers, body = binary(raw, json.dumps(data).encode())
        return Request("names no Kubernetes object can have", "POST", "/", headers, body, names_seeded=True)

    def reference_garbage(self) -> Request:
        raw, _ = self._base()
        headers, _ = binary(raw)
        headers = _replace_header(
            headers, "ce-type", "dev.knative.apiserver.ref." + self.rng.choice(["add", "update", "delete"])
        )
        target = self.rng.choice(self.pods + self.jobs)
        ref = {
            "kind": target["kind"],
            "apiVersion": target["apiVersion"],
            "name": target["metadata"]["name"],
            "namespace": self.namespace,
        }
        action = self.rng.randrange(5)
        if action == 0:
            del ref[self.rng.choice(list(ref))]
        elif action == 1:
            ref[self.rng.choice(list(ref))] = self.rng.choice(WRONG_VALUES)
        elif action == 2:
            ref["apiVersion"], ref["kind"] = self.rng.choice(
                [
                    ("kubeflow.org/v9", "PyTorchJob"),
                    ("kubeflow.org/v1", "Pod"),
                    ("v1", "PyTorchJob"),
                    ("apps/v1", "Deployment"),
                    ("v1", "Secret"),
                    ("kubeflow.org/v1", "MXJob"),
                    ("kubeflow.org/v2beta1", "MPIJob"),
                    ("example.com/v1", "PyTorchJob"),
                ]
            )
        elif action == 3:
            ref["extra"] = {"spec": {"containers": []}}
        else:
            ref = self.rng.choice([[ref], "ref", None, 3])
        return Request(
            "Reference-mode garbage", "POST", "/", headers, json.dumps(ref).encode(), names_seeded=True
        )

    def structured(self) -> Request:
        raw, _ = self._base()
        event = copy.deepcopy(raw)
        action = self.rng.randrange(6)
        if action == 0:
            del event[self.rng.choice([k for k in ("id", "source", "type", "specversion") if k in event])]
        elif action == 1:
            event[self.rng.choice(["id", "source", "type", "specversion", "time"])] = self.rng.choice(
                WRONG_VALUES
            )
        elif action == 2:
            event["data"] = self.rng.choice(["a string", 12, [1], None])
        elif action == 3:
            event.pop("data", None)
            event["data_base64"] = self.rng.choice(
                [
                    "!!!not base64",
                    base64.b64encode(b"\xff\x00garbage").decode(),
                    base64.b64encode(json.dumps(raw.get("data")).encode()).decode(),
                ]
            )
        elif action == 4:
            event = [event]
        else:
            event["specversion"] = self.rng.choice(["0.3", "2.0"])
        return Request(
            "structured mode garbage",
            "POST",
            "/",
            [
                (
                    "Content-Type",
                    self.rng.choice(
                        ["application/cloudevents+json", "application/cloudevents+json; charset=utf-8"]
                    ),
                )
            ],
            json.dumps(event).encode(),
        )

    FAMILIES = (
        ("hostile_valid", 12),
        ("header_garbage", 10),
        ("content_type", 6),
        ("method_and_path", 4),
        ("truncated", 8),
        ("nested", 5),
        ("huge", 3),
        ("wrong_type", 22),
        ("raw_tokens", 6),
        ("encoding", 5),
        ("not_an_object", 4),
        ("impossible_names", 8),
        ("reference_garbage", 6),
        ("structured", 6),
    )

    def requests(self, count: int) -> list[Request]:
        names, weights = zip(*self.FAMILIES)
        return [getattr(self, self.rng.choices(names, weights=weights)[0])() for _ in range(count)]
