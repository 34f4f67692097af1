"""`kubectl apply` for the tests: raw calls to the API server, server-side apply of manifests.

One home for applying what a user applies: the manifest tests (tests/delivery) dry-run every
object through it, and the Knative installs (tests/support/knative) apply the kustomize render
of knative/ through it, in kubectl's order (Namespaces and CRDs first).
"""

from __future__ import annotations

import json
import time

# kubectl applies these first so that the rest has a namespace and a type to land in.
_FIRST = ("Namespace", "CustomResourceDefinition", "ServiceAccount", "ClusterRole", "Role")


class ApplyError(RuntimeError):
    """The API server refused an object; the message names it and carries the answer."""


class RawApi:
    """Raw HTTP calls to the API server (discovery, server-side apply, reviews).

    Plain requests with the ApiClient's host, CA and token: the kubernetes client's own
    low-level call_api changed shape between the versions pyproject allows.
    """

    def __init__(self, api_client, field_manager: str = "podsweeper-tests"):
        import requests

        cfg = api_client.configuration
        self.host = cfg.host.rstrip("/")
        self.session = requests.Session()
        # No REQUESTS_CA_BUNDLE / proxy from the environment: this is our own loopback server.
        self.session.trust_env = False
        self.verify = cfg.ssl_ca_cert or True
        token = cfg.get_api_key_with_prefix("authorization") or cfg.get_api_key_with_prefix("BearerToken")
        assert token, "expected a token-authenticated admin client"
        self.session.headers["Authorization"] = token
        self.session.headers["Accept"] = "application/json"
        self._discovery: dict[str, dict] = {}
        self.field_manager = field_manager

    def call(self, method: str, path: str, query=None, body=None, content_type=None):
        headers = {"Content-Type": content_type} if content_type else {}
        resp = self.session.request(
            method, self.host + path, params=query, data=body, headers=headers, verify=self.verify, timeout=30
        )
        return resp.status_code, resp.content

    def resources(self, api_version: str) -> dict[str, dict]:
        """Discovery for one group/version: kind -> APIResource (None if not served)."""
        if api_version not in self._discovery:
            path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            status, data = self.call("GET", path)
            if status == 404:
                return {}
            assert status == 200, f"GET {path}: {status} {data!r}"
            listing = json.loads(data)["resources"]
            self._discovery[api_version] = {r["kind"]: r for r in listing if "/" not in r["name"]}
        return self._discovery[api_version]

    def path_of(self, obj: dict, named: bool = True) -> str:
        api_version = obj["apiVersion"]
        resource = self.resources(api_version).get(obj["kind"])
        assert resource, f"{api_version} {obj['kind']} is not served by the API server"
        prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        if resource["namespaced"]:
            prefix += f"/namespaces/{obj['metadata']['namespace']}"
        path = f"{prefix}/{resource['name']}"
        return f"{path}/{obj['metadata']['name']}" if named else path

    def create(self, obj: dict, dry_run: bool = True) -> tuple[int, bytes]:
        """POST with strict field validation: unknown fields anywhere are errors.

        (Server-side apply alone does not catch every unknown field: inside an atomic list,
        e.g. ApiServerSource spec.resources[], it prunes them silently.)
        A 409 AlreadyExists comes after decoding, admission and validation, so it too means
        the object is valid.
        """
        query = [("fieldManager", self.field_manager), ("fieldValidation", "Strict")]
        if dry_run:
            query.append(("dryRun", "All"))
        return self.call("POST", self.path_of(obj, named=False), query, json.dumps(obj), "application/json")

    def apply(self, obj: dict, dry_run: bool = True) -> tuple[int, bytes]:
        """Server-side apply (as `kubectl apply --server-side [--dry-run=server]`)."""
        query = [("fieldManager", self.field_manager), ("fieldValidation", "Strict"), ("force", "true")]
        if dry_run:
            query.append(("dryRun", "All"))
        return self.call("PATCH", self.path_of(obj), query, json.dumps(obj), "application/apply-patch+yaml")

    def delete(self, obj: dict) -> None:
        status, data = self.call("DELETE", self.path_of(obj))
        assert status in (200, 202, 404), f"DELETE {self.path_of(obj)}: {status} {data!r}"

    def apply_all(self, objects: list[dict], timeout: float = 30.0) -> None:
        """Server-side apply every object, as `kubectl apply --server-side -f` does, in kubectl's
        order. A type whose CRD was just created may not be served for a moment: retried until
        `timeout`."""
        ordered = sorted(
            objects, key=lambda o: _FIRST.index(o["kind"]) if o["kind"] in _FIRST else len(_FIRST)
        )
        for obj in ordered:
            deadline = time.monotonic() + timeout
            while True:
                self._discovery.pop(obj["apiVersion"], None)
                if self.resources(obj["apiVersion"]).get(obj["kind"]) is not None:
                    status, data = self.apply(obj, dry_run=False)
                    if status in (200, 201):
                        break
                    if status != 404 or time.monotonic() > deadline:
                        name = (
                            f"{obj['kind']} {obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"
                        )
                        raise ApplyError(f"apply {name}: {status} {data.decode(errors='replace')}")
                elif time.monotonic() > deadline:
                    raise ApplyError(f"{obj['apiVersion']} {obj['kind']} is not served after {timeout:.0f}s")
                time.sleep(0.2)

    def get(self, obj: dict) -> dict | None:
        """The object as the API server has it now (None: not there)."""
        status, data = self.call("GET", self.path_of(obj))
        if status == 404:
            return None
        if status != 200:
            raise ApplyError(f"GET {self.path_of(obj)}: {status} {data!r}")
        return json.loads(data)
