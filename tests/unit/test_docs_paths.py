"""Every repository path the docs name exists, so a rename cannot leave a page pointing nowhere.

A name is a backticked word in docs/*.md or README.md. One that starts with a top-level
directory of the repository (`tests/...`, `function/...`, `knative/...`) must exist as written;
a bare file name (`oracle.py`, `rbac.yaml`) must be some file's name in the repository. URLs,
globs and placeholders (`<name>`, `{1,2}`, `*`) are no names; a `path.py::test` citation names
its file; a trailing `:line` or `#anchor` is cut. Upstream paths (Knative's `pkg/...`) start
with no directory of ours and are not checked.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
TOP = {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".") and p.name != "out"}
# Bare file names only: a directory-less word with one of these endings (not .sh: API groups
# such as batch.volcano.sh end so).
FILE_NAME = re.compile(r"^[\w.-]+\.(py|yaml|yml|md|jsonl|json|go|tpl|toml)$")
# Bare names that are not files of ours, and what they are.
NOT_OURS = {"evidence.json": "the key of an evidence ConfigMap"}
BACKTICKED = re.compile(r"`([^`\s]+)`")


def names(text: str) -> tuple[set[str], set[str]]:
    """(the paths, the bare file names) a page names."""
    paths, bare = set(), set()
    for word in BACKTICKED.findall(text):
        word = re.sub(r"(:\d+|#.*)$", "", word.split("::")[0].rstrip(".,;)"))
        if "://" in word or any(c in word for c in "<>{}*$[]|=~"):
            continue
        if "/" in word and word.split("/")[0] in TOP:
            paths.add(word)
        elif "/" not in word and FILE_NAME.match(word) and word not in NOT_OURS:
            bare.add(word)
    return paths, bare


def repository_file_names() -> set[str]:
    skip = {
        ".git",
        ".venv",
        "out",
        "__pycache__",
        ".hypothesis",
        ".pytest_cache",
        ".mypy_cache",
        ".ruff_cache",
    }
    found = set()
    for path in ROOT.rglob("*"):
        if path.is_file() and not skip.intersection(path.relative_to(ROOT).parts):
            found.add(path.name)
    return found


def test_the_check_finds_names_and_only_names():
    text = (
        "see `tests/unit/test_x.py::test_y`, `function/podsweeper/`, `knative/a.yaml:3`, `out/x`,"
        " `https://x/y`, `tests/<name>.py`, `PODSWEEPER_X`, `oracle.py`, `batch.volcano.sh`,"
        " `pkg/adapter/x.go`, `evidence.json`, `seed-{1,2}.jsonl`"
    )
    assert names(text) == ({"tests/unit/test_x.py", "function/podsweeper/", "knative/a.yaml"}, {"oracle.py"})


@pytest.fixture(scope="module")
def file_names() -> set[str]:
    return repository_file_names()


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_path_a_page_names_exists(page, file_names):
    paths, bare = names(page.read_text())
    missing = sorted(p for p in paths if not (ROOT / p).exists()) + sorted(bare - file_names)
    assert not missing, f"{page.name} names files that do not exist: {missing}"
