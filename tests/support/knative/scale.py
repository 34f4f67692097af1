"""The shipped ApiServerSource at cluster scale: what Eventing's reconciler costs per namespace.

    python -m tests.support.knative.scale                  # 1,000 namespaces (~15 min on 2 cores)
    python -m tests.support.knative.scale --namespaces 200 --output out/source-scale.json
    make source-scale                                      # the same, figures to out/

On the test world with Eventing's real controller (tests/support/knative/eventing.py), it
creates N namespaces, applies the install without Serving (knative/overlays/without-serving:
the shipped source, `namespaceSelector: {}`), and measures, from kube-apiserver's own
request counter (`apiserver_request_total` for subjectaccessreviews) and the source's status:

- the SubjectAccessReviews of the first reconcile and the time until the source is Ready with
  every namespace in `status.namespaces` (and that list's size in bytes);
- what one more namespace costs: SARs and the time until it is listed;
- the same namespace create with the skip-permissions-check annotation;
- a source restricted by a namespace label (`podsweeper.dev/watch: "true"` on 5 % of them).

Nothing here asserts: the figures are for docs/deploy.md's choice of the shipped default.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
INSTALL = ROOT / "knative" / "overlays" / "without-serving"
SKIP_ANNOTATION = "features.knative.dev/apiserversource-skip-permissions-check"
WATCH_LABEL = "podsweeper.dev/watch"


def say(text: str) -> None:
    print(f"source-scale: {text}", file=sys.stderr, flush=True)


def sar_count(raw) -> int:
    """kube-apiserver's count of SubjectAccessReview creates so far."""
    status, data = raw.call("GET", "/metrics")
    if status != 200:
        raise RuntimeError(f"GET /metrics: {status}")
    text = data.decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("apiserver_request_total{") and 'resource="subjectaccessreviews"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return int(total)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--namespaces", type=int, default=1000)
    parser.add_argument("--output", type=Path, default=ROOT / "out" / "source-scale.json")
    args = parser.parse_args(argv)

    from kubernetes import client

    from tests.support.controlplane.launcher import ControlPlane
    from tests.support.knative.eventing import Eventing, conditions
    from tests.support.kubectl import RawApi
    from tests.support.tools.kustomize import render
    from tests.support.world.launcher import World

    figures: dict[str, object] = {"namespaces_created": args.namespaces}
    with ControlPlane(log=sys.stderr) as cp, World(cp, log=sys.stderr), Eventing(cp) as ev:
        core = client.CoreV1Api(ev.admin)
        raw = RawApi(ev.admin)
        labelled = max(1, args.namespaces // 20)

        def make(i: int) -> None:
            labels = {WATCH_LABEL: "true"} if i < labelled else {}
            core.create_namespace({"metadata": {"name": f"team-{i:04d}", "labels": labels}})

        t0 = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(make, range(args.namespaces)))
        total_ns = len(core.list_namespace().items)
        say(f"{args.namespaces} namespaces created in {time.monotonic() - t0:.0f}s ({total_ns} in all)")

        objects = render(INSTALL)
        before = sar_count(raw)
        t0 = time.monotonic()
        ev.install(objects)
        source = {}
        while time.monotonic() - t0 < 3600:
            source = ev.source("ApiServerSource", "podsweeper") or {}
            listed = len((source.get("status") or {}).get("namespaces") or [])
            if conditions(source).get("Ready", {}).get("status") == "True" and listed >= total_ns:
                break
            time.sleep(1)
        first = time.monotonic() - t0
        sars = sar_count(raw) - before
        status_bytes = len(json.dumps(source["status"]["namespaces"]))
        figures.update(
            first_reconcile_seconds=round(first, 1),
            first_reconcile_sars=sars,
            sars_expected=len(source["spec"]["resources"]) * 3 * total_ns,
            status_namespaces=len(source["status"]["namespaces"]),
            status_namespaces_bytes=status_bytes,
        )
        say(f"first reconcile: {sars} SARs, Ready with {total_ns} namespaces listed after {first:.0f}s")

        def drained(quiet: float = 15.0, timeout: float = 1800.0) -> None:
            """Until no SubjectAccessReview came for `quiet` seconds: the resyncs a change
            queued have run, so the next figure is that of the next change alone."""
            t0, last, since = time.monotonic(), sar_count(raw), time.monotonic()
            while time.monotonic() - since < quiet and time.monotonic() - t0 < timeout:
                time.sleep(1)
                now = sar_count(raw)
                if now != last:
                    last, since = now, time.monotonic()

        def one_more(name: str) -> tuple[int, float]:
            drained()
            before = sar_count(raw)
            t0 = time.monotonic()
            core.create_namespace({"metadata": {"name": name}})
            while name not in ((ev.source("ApiServerSource", "podsweeper") or {}).get("status") or {}).get(
                "namespaces", []
            ):
                if time.monotonic() - t0 > 1800:
                    break
                time.sleep(0.5)
            listed = time.monotonic() - t0
            time.sleep(5)  # what the resync still sends after the status was written
            return sar_count(raw) - before, listed

        sars, listed = one_more("team-one-more")
        figures.update(namespace_create_sars=sars, namespace_create_listed_seconds=round(listed, 1))
        say(f"one namespace more: {sars} SARs, listed after {listed:.0f}s")

        # The same with the permission check skipped.
        skipped = copy.deepcopy(objects)
        for obj in skipped:
            if obj["kind"] == "ApiServerSource":
                obj["metadata"].setdefault("annotations", {})[SKIP_ANNOTATION] = "true"
        ev.install(skipped)
        sars, listed = one_more("team-one-more-skipped")
        figures.update(skip_check_namespace_create_sars=sars, skip_check_listed_seconds=round(listed, 1))
        say(f"with {SKIP_ANNOTATION}: {sars} SARs, listed after {listed:.0f}s")

        # A source restricted to labelled namespaces.
        restricted = copy.deepcopy(objects)
        for obj in restricted:
            if obj["kind"] == "ApiServerSource":
                obj["spec"]["namespaceSelector"] = {"matchLabels": {WATCH_LABEL: "true"}}
        drained()
        before = sar_count(raw)
        t0 = time.monotonic()
        ev.install(restricted)
        while time.monotonic() - t0 < 1800:
            source = ev.source("ApiServerSource", "podsweeper") or {}
            if len((source.get("status") or {}).get("namespaces") or []) == labelled:
                break
            time.sleep(0.5)
        figures.update(
            labelled_namespaces=labelled,
            labelled_reconcile_seconds=round(time.monotonic() - t0, 1),
            labelled_reconcile_sars=sar_count(raw) - before,
        )
        say(f"restricted to {labelled} labelled namespaces: {figures['labelled_reconcile_sars']} SARs")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
