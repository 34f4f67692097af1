"""The replay page in a real browser: it renders every pod, logs no error and fetches nothing.

Headless Debian chromium driven by Playwright (installed with apt-get when missing).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from podsweeper.config import Settings
from podsweeper.page import page
from podsweeper.replay import replay
from tests.delivery.chromium import ARGS, ensure_chromium
from tests.fixtures import scenarios

SEED_2 = Path(scenarios.__file__).parent / "seed-experiment-2.jsonl"


def fixture_pods(path: Path) -> list[str]:
    names = []
    for line in path.read_text().splitlines():
        data = json.loads(line).get("data") or {}
        if data.get("kind") == "Pod" and data["metadata"]["name"] not in names:
            names.append(data["metadata"]["name"])
    return names


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    executable = ensure_chromium()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(executable), args=ARGS)
        yield browser
        browser.close()


def test_seed_experiment_2_page_renders_every_pod_and_fetches_nothing(browser, tmp_path):
    out = tmp_path / "replay.html"
    out.write_text(page(replay([str(SEED_2)], Settings(dry_run=False))), encoding="utf-8")
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        tab = context.new_page()
        requests: list[str] = []
        console: list[str] = []
        errors: list[str] = []
        tab.on("request", lambda request: requests.append(request.url))
        tab.on("console", lambda message: console.append(f"{message.type}: {message.text}"))
        tab.on("pageerror", lambda error: errors.append(str(error)))
        tab.goto(out.as_uri(), wait_until="load")
        tab.wait_for_load_state("networkidle")

        assert requests == [out.as_uri()]  # the page itself, and nothing else
        assert [line for line in console if line.startswith(("error", "warning"))] == []
        assert errors == []

        assert tab.locator("section.job h2").all_inner_texts() == ["PyTorchJob default/pytest"]
        labels = tab.locator("svg.timeline text.rowlabel").all_text_contents()
        pods = fixture_pods(SEED_2)
        assert len(pods) == 4
        for name in pods:
            assert name in labels, name  # a row of the timeline
            assert tab.get_by_text(name, exact=True).first.is_visible(), name
        box = tab.locator("svg.timeline").first.bounding_box()
        assert box is not None and box["width"] > 800 and box["height"] > 150
        decisions = tab.locator("table.decisions tbody tr")
        assert decisions.count() == 4
        assert "finished-job-active-pod" in tab.locator("body").inner_text()
        for worker in ("pytest-worker-0", "pytest-worker-1", "pytest-worker-2"):
            evidence = tab.locator("table.evidence").get_by_role("cell", name=f"default/{worker}", exact=True)
            assert evidence.is_visible(), worker
    finally:
        context.close()


def test_trainer_orphan_jobset_page_draws_the_chain_indented_under_the_trainjob(browser, tmp_path):
    recorded = SEED_2.parent / "recorded" / "trainer-orphan-jobset.jsonl"
    out = tmp_path / "trainer.html"
    out.write_text(page(replay([str(recorded)], Settings(dry_run=False))), encoding="utf-8")
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        tab = context.new_page()
        requests: list[str] = []
        errors: list[str] = []
        tab.on("request", lambda request: requests.append(request.url))
        tab.on("pageerror", lambda error: errors.append(str(error)))
        tab.goto(out.as_uri(), wait_until="load")
        tab.wait_for_load_state("networkidle")
        assert requests == [out.as_uri()] and errors == []

        assert tab.locator("section.job h2").all_inner_texts() == ["TrainJob trainer-orphan-jobset/lost"]
        labels = tab.locator("svg.timeline text.rowlabel")
        texts = labels.all_text_contents()
        assert texts == ["TrainJob", "JobSet lost", "Job lost-node-0", *fixture_pods(recorded)]
        lefts = [box["x"] for box in (labels.nth(i).bounding_box() for i in range(len(texts))) if box]
        assert lefts[0] < lefts[1] < lefts[2] < lefts[3] == lefts[4]  # each level indented under the last
        # the orphaned JobSet's delete is marked on its own row, not on the TrainJob's
        marker = tab.locator("svg.timeline g.decision-delete rect").bounding_box()
        rows = [labels.nth(i).bounding_box() for i in range(2)]
        assert marker is not None and all(rows)
        middle = [box["y"] + box["height"] / 2 for box in rows if box]
        assert marker["y"] < middle[1] < marker["y"] + marker["height"], (marker, rows)
        assert not marker["y"] < middle[0] < marker["y"] + marker["height"]
        assert "cleanPodPolicy" not in tab.locator("body").inner_text()
    finally:
        context.close()
