"""The serve command has one home (tests/support/harness/served.py's SERVE_COMMAND): the Dockerfile's
CMD and README.md must say exactly the same, so what the tests serve is what ships."""

from __future__ import annotations

import json

from tests.support.harness.served import ROOT, SERVE_COMMAND


def test_dockerfile_cmd_is_the_serve_command():
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    cmds = [line.removeprefix("CMD ") for line in lines if line.startswith("CMD ")]
    assert len(cmds) == 1, cmds
    assert json.loads(cmds[0]) == list(SERVE_COMMAND)  # exec form: no shell between


def test_readme_documents_the_serve_command():
    assert " ".join(SERVE_COMMAND) in (ROOT / "README.md").read_text()
