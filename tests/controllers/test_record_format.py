"""`podsweeper record` writes exactly what Knative's receive adapter sends.

One scenario (seed experiment 1, the operator's own cleanup included: adds, updates and
deletes of pods and a job) is watched at once by two real adapters (Resource and Reference
mode), each POSTing to a tiny capturing sink, and by two `podsweeper record` processes in the
same modes. The binary-mode requests the sinks received, turned into structured events, must
carry the same attribute names, the same attribute values where they are deterministic,
the same events in the same order per object, and the same data.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.support.adapter.launcher import ReceiveAdapter, install_source_rbac, source_config
from tests.support.stack.players import Play, experiment_1
from tests.support.stack.recording import RecordProcess

RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z$")
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


class CapturingSink:
    """An HTTP server that accepts every CloudEvent (202) and keeps it in structured form."""

    def __init__(self):
        self.events: list[dict] = []
        self.transport: list[dict] = []  # non-CloudEvent headers of each request
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                event = {k[3:].lower(): v for k, v in self.headers.items() if k.lower().startswith("ce-")}
                event["datacontenttype"] = self.headers.get("Content-Type")
                event["data"] = json.loads(body)
                sink.events.append(event)
                sink.transport.append(
                    {k: v for k, v in self.headers.items() if not k.lower().startswith("ce-")}
                )
                self.send_response(202)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def _settle(counters, quiet: float = 0.7, timeout: float = 20.0) -> None:
    """Wait until every counter agrees and none has moved for `quiet` seconds."""
    deadline = time.monotonic() + timeout
    last, since = None, time.monotonic()
    while time.monotonic() < deadline:
        now = tuple(c() for c in counters)
        if now != last:
            last, since = now, time.monotonic()
        elif len(set(now)) == 1 and time.monotonic() - since >= quiet:
            return
        time.sleep(0.05)


def _by_object(events: list[dict]) -> dict[str, list[dict]]:
    """Events per subject, in arrival order (one watch per collection: order is per object)."""
    grouped: dict[str, list[dict]] = defaultdict(list)
    for event in events:
        grouped[event["subject"]].append(event)
    return grouped


def _compare(sent: list[dict], recorded: list[dict], mode: str) -> None:
    assert sent, "the adapter sent nothing"
    assert len(recorded) == len(sent), (len(recorded), len(sent))
    sent_keys = {frozenset(e) for e in sent}
    recorded_keys = {frozenset(e) for e in recorded}
    assert sent_keys == recorded_keys and len(sent_keys) == 1, (sent_keys, recorded_keys)
    prefix = "dev.knative.apiserver.ref." if mode == "Reference" else "dev.knative.apiserver.resource."
    for event in [*sent, *recorded]:
        assert event["type"].startswith(prefix)
        assert RFC3339.match(event["time"]), event["time"]
        assert UUID.match(event["id"]), event["id"]
        assert event["specversion"] == "1.0"
        assert event["datacontenttype"] == "application/json"
    assert {e["source"] for e in sent} == {e["source"] for e in recorded}
    deterministic = ("type", "subject", "kind", "apiversion", "name", "namespace", "data")
    sent_by, recorded_by = _by_object(sent), _by_object(recorded)
    assert sent_by.keys() == recorded_by.keys()
    for subject, events in sent_by.items():
        mine = recorded_by[subject]
        assert [e["type"] for e in mine] == [e["type"] for e in events], subject
        for theirs, ours in zip(events, mine):
            for key in deterministic:
                assert ours[key] == theirs[key], (subject, theirs["type"], key)
    # Every id is fresh (the adapter: uuid.New per send, retries aside).
    assert len({e["id"] for e in recorded}) == len(recorded)


def test_record_writes_what_the_adapter_sends(receive_adapter, control_plane, admin_api, namespace, tmp_path):
    install_source_rbac(admin_api)
    source_kubeconfig = control_plane.write_kubeconfig(tmp_path / "kubeconfig-source", "source")
    with (
        CapturingSink() as resource_sink,
        CapturingSink() as reference_sink,
        ReceiveAdapter(
            source_kubeconfig, source_config([namespace], "Resource"), resource_sink.url, workdir=tmp_path
        ),
        ReceiveAdapter(
            source_kubeconfig, source_config([namespace], "Reference"), reference_sink.url, workdir=tmp_path
        ),
    ):
        # The read-only adapter identity is all `record` needs.
        recorders = {
            mode: RecordProcess(source_kubeconfig, namespace, tmp_path / f"{mode}.jsonl", mode)
            for mode in ("Resource", "Reference")
        }
        try:
            play = Play(admin_api, namespace, scale=0.03)
            experiment_1(play, operator_cleanup=True)
            _settle(
                [
                    lambda: len(resource_sink.events),
                    lambda: len(reference_sink.events),
                    lambda: len(recorders["Resource"].events()),
                    lambda: len(recorders["Reference"].events()),
                ]
            )
        finally:
            codes = {mode: r.stop() for mode, r in recorders.items()}
    assert codes == {"Resource": 0, "Reference": 0}, {m: r.stderr() for m, r in recorders.items()}
    assert all(t.get("Kn-Namespace") == "podsweeper" for t in resource_sink.transport)
    _compare(resource_sink.events, recorders["Resource"].events(), "Resource")
    _compare(reference_sink.events, recorders["Reference"].events(), "Reference")
    print(
        f"\nrecord vs adapter: {len(resource_sink.events)} Resource-mode and "
        f"{len(reference_sink.events)} Reference-mode events identical but for id and time",
        file=sys.stderr,
    )
    kinds_seen = {e["kind"] for e in resource_sink.events}
    verbs_seen = {e["type"].rsplit(".", 1)[1] for e in resource_sink.events}
    assert kinds_seen == {"Pod", "PyTorchJob"} and verbs_seen == {"add", "update", "delete"}
