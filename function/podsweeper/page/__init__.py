"""`podsweeper replay --html`: one self-contained page with a timeline per training job.

`build.build(run)` turns a ReplayRun into the page's model (`model`: per job its rows, the
job's own, then its JobSets, batch Jobs and pods each under the controller it came from; their
states as spans, read by `states`; restarts, ends and decisions as marks; the evidence of
deleted pods); `render.render(page)` writes it as HTML with inline CSS (`style`) and inline SVG
(`svg`). Model and drawing are kept apart so each can be read, and tested, alone.
"""

from __future__ import annotations

from podsweeper.page.build import build
from podsweeper.page.render import render
from podsweeper.replay import ReplayRun


def page(run: ReplayRun) -> str:
    """The whole HTML page for a replay."""
    return render(build(run))
