"""A validating admission webhook, served by the test process, that refuses a JobSet's first DELETE.

kubeflow/trainer#3833: when a TrainJob's activeDeadlineSeconds expires, Trainer v2.3.0 marks it
Failed and deletes its JobSet once; if that DELETE fails, the error is only logged (at V(2)) and
never retried. `RefuseDeletes` makes that DELETE fail for real: a ValidatingWebhookConfiguration
for DELETE on jobsets in one namespace points at an HTTPS server in this process, which denies
the first `refuse` non-dry-run DELETEs of each named JobSet and lets every later one through. It
records every DELETE it is asked about (time, name, uid, dry run, options, verdict), so a test
can tell that the delete was tried and refused, and whether anyone tried again.

Dry-run DELETEs are always denied with PROBE: `ready()` uses one to know the API server calls
the webhook (a configuration takes effect a moment after it is created).

    with RefuseDeletes(api, ns, {"myjob": 1}) as hook:
        wait_for("the webhook", hook.ready)
        ...
        hook.deletes("myjob")  # [Delete(...), ...]
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import json
import ssl
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.support.world import webhook_cert

HOOK = "refuse-delete.sim.podsweeper.dev"
REFUSED = "refused by the test's webhook (kubeflow/trainer#3833: the DELETE fails once)"
PROBE = "dry-run DELETE: refuse-delete webhook is live"


@dataclasses.dataclass(frozen=True)
class Delete:
    at: float  # time.time() when the webhook was asked
    name: str
    uid: str  # of the object to be deleted (oldObject)
    dry_run: bool
    options: dict  # DeleteOptions as sent (propagationPolicy, preconditions)
    allowed: bool


class RefuseDeletes:
    def __init__(self, api: client.ApiClient, namespace: str, refuse: dict[str, int]):
        self.api = api
        self.namespace = namespace
        self.name = f"podsweeper-refuse-jobset-delete-{namespace}"
        self._left = dict(refuse)
        self._seen: list[Delete] = []
        self._lock = threading.Lock()
        self._tmp = tempfile.TemporaryDirectory(prefix="refuse-delete-")
        self._server: ThreadingHTTPServer | None = None

    # -- what the webhook saw -----------------------------------------------------------

    def deletes(self, name: str | None = None, *, dry_run: bool = False) -> list[Delete]:
        with self._lock:
            return [d for d in self._seen if (name is None or d.name == name) and d.dry_run == dry_run]

    def refused(self, name: str) -> list[Delete]:
        return [d for d in self.deletes(name) if not d.allowed]

    def ready(self, jobset: str) -> bool:
        """True once a dry-run DELETE of `jobset` (it must exist) is denied by this webhook."""
        try:
            client.CustomObjectsApi(self.api).delete_namespaced_custom_object(
                "jobset.x-k8s.io", "v1alpha2", self.namespace, "jobsets", jobset, dry_run="All"
            )
        except ApiException as e:
            return PROBE in str(e.body)
        return False

    # -- the server -----------------------------------------------------------------------

    def _review(self, review: dict) -> dict:
        request = review["request"]
        old = request.get("oldObject") or {}
        name = request.get("name") or ""
        dry_run = bool(request.get("dryRun"))
        with self._lock:
            if dry_run:
                allowed, message = False, PROBE
            elif request.get("operation") == "DELETE" and self._left.get(name, 0) > 0:
                self._left[name] -= 1
                allowed, message = False, REFUSED
            else:
                allowed, message = True, ""
            if request.get("operation") == "DELETE":
                self._seen.append(
                    Delete(
                        at=time.time(),
                        name=name,
                        uid=(old.get("metadata") or {}).get("uid", ""),
                        dry_run=dry_run,
                        options=request.get("options") or {},
                        allowed=allowed,
                    )
                )
        response = {"uid": request["uid"], "allowed": allowed}
        if not allowed:
            response["status"] = {"code": 403, "reason": "Forbidden", "message": message}
        return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}

    def _handler(self):
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                answer = json.dumps(outer._review(json.loads(body))).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args):  # quiet
                pass

        return Handler

    def start(self) -> RefuseDeletes:
        pair = webhook_cert.generate("podsweeper-refuse-delete-ca", ["localhost"], datetime.timedelta(days=1))
        tmp = Path(self._tmp.name)
        (tmp / "tls.crt").write_bytes(pair["tls.crt"])
        (tmp / "tls.key").write_bytes(pair["tls.key"])
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(tmp / "tls.crt", tmp / "tls.key")
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        threading.Thread(target=self._server.serve_forever, name=self.name, daemon=True).start()
        port = self._server.server_address[1]
        config = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": self.name},
            "webhooks": [
                {
                    "name": HOOK,
                    "clientConfig": {
                        "url": f"https://127.0.0.1:{port}/validate",
                        "caBundle": base64.b64encode(pair["ca.crt"]).decode(),
                    },
                    "rules": [
                        {
                            "apiGroups": ["jobset.x-k8s.io"],
                            "apiVersions": ["*"],
                            "operations": ["DELETE"],
                            "resources": ["jobsets"],
                            "scope": "Namespaced",
                        }
                    ],
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": self.namespace}},
                    "failurePolicy": "Fail",
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                    "timeoutSeconds": 5,
                }
            ],
        }
        client.AdmissionregistrationV1Api(self.api).create_validating_webhook_configuration(config)
        return self

    def stop(self) -> None:
        """Removes the configuration first (failurePolicy Fail: no DELETE of a JobSet in the
        namespace would get through once the server is gone, the namespace's deletion neither)."""
        try:
            client.AdmissionregistrationV1Api(self.api).delete_validating_webhook_configuration(self.name)
        except ApiException as e:
            if e.status != 404:
                raise
        finally:
            if self._server is not None:
                self._server.shutdown()
                self._server.server_close()
                self._server = None
            self._tmp.cleanup()

    def __enter__(self) -> RefuseDeletes:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
