"""The test world's stand-ins for a node (tests/support/knative): env resolution and the Service
network. The e2e tests trust them to run the generated pods as a kubelet and kube-proxy would."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from tests.support.knative.kubelet import KubeletError, resolve_env
from tests.support.knative.network import ClusterNetwork

POD = {
    "metadata": {"name": "adapter-abc", "namespace": "podsweeper", "uid": "u-1"},
    "spec": {"serviceAccountName": "podsweeper-source", "nodeName": "kwok-node-0"},
    "status": {"podIP": "10.0.0.7"},
}


def test_env_is_resolved_in_order_from_values_fields_and_config_maps():
    container = {
        "env": [
            {"name": "A", "value": "1"},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "NS", "value": "", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "IMG", "valueFrom": {"configMapKeyRef": {"name": "images", "key": "x"}}},
            {
                "name": "OPT",
                "valueFrom": {"configMapKeyRef": {"name": "images", "key": "gone", "optional": True}},
            },
            {"name": "EMPTY"},
        ]
    }
    maps = {("podsweeper", "images"): {"data": {"x": "registry/x:1"}}}
    env = resolve_env(POD, container, lambda ns, name: maps.get((ns, name)))
    assert list(env.items()) == [
        ("A", "1"),
        ("POD_NAME", "adapter-abc"),
        ("NS", "podsweeper"),
        ("IMG", "registry/x:1"),
        ("EMPTY", ""),
    ]


def test_a_missing_required_key_or_an_unknown_source_is_an_error():
    missing = {"env": [{"name": "IMG", "valueFrom": {"configMapKeyRef": {"name": "images", "key": "x"}}}]}
    with pytest.raises(KubeletError, match="no key x in images"):
        resolve_env(POD, missing, lambda ns, name: None)
    secret = {"env": [{"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}
    with pytest.raises(KubeletError, match="unsupported source"):
        resolve_env(POD, secret, lambda ns, name: None)


class _Echo(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        data = json.dumps(
            {"path": self.path, "body": body.decode(), "ce": self.headers.get("Ce-Type")}
        ).encode()
        self.send_response(202)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def echo():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


def test_the_service_network_routes_a_service_host_to_its_endpoints(echo):
    asked = []

    def endpoints(namespace, service, port):
        asked.append((namespace, service, port))
        return [echo] if (namespace, service, port) == ("podsweeper", "podsweeper", 80) else []

    with ClusterNetwork(endpoints) as network:
        proxies = {"http": network.url}
        resp = requests.post(
            "http://podsweeper.podsweeper.svc.cluster.local/x?y=1",
            data="{}",
            headers={"Ce-Type": "dev.knative.sources.ping"},
            proxies=proxies,
            timeout=10,
        )
        assert resp.status_code == 202
        assert resp.json() == {"path": "/x?y=1", "body": "{}", "ce": "dev.knative.sources.ping"}
        assert network.requests == {("podsweeper", "podsweeper"): 1}
        # No endpoint: 503 (kube-proxy would refuse the connection); not a Service host: 502.
        assert (
            requests.post(
                "http://other.podsweeper.svc.cluster.local/", proxies=proxies, timeout=10
            ).status_code
            == 503
        )
        assert requests.post("http://example.com/", proxies=proxies, timeout=10).status_code == 502
        assert asked == [("podsweeper", "podsweeper", 80), ("podsweeper", "other", 80)]
        assert network.refused[-1] == "not a cluster Service host: example.com"
