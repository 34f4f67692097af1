"""docs/guarantees.md holds as written: every test it cites is collected by pytest, every figure
it quotes is asserted by one of the tests of its row, and its figures table is the one the
tests generate (not one written by hand).

A quoted figure is a backticked `name op bound` (e.g. `fuzz: answers 2xx (real API) >= 4400`)
in a row's last column; it must be a `figures.within(name, value, op, bound)` call of a module
the row cites, its bound evaluated in that module. Numbers in that column outside such a quote
are refused (HTTP status codes aside), so no figure is quoted that nothing asserts.
"""

from __future__ import annotations

import ast
import functools
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "guarantees.md"
BEGIN, END = "<!-- figures:begin -->", "<!-- figures:end -->"
REF = re.compile(r"^(?:(?P<prefix>[A-Z])|(?P<path>tests/(?:\w+/)*test_\w+\.py))(?:::(?P<name>\w+))?$")
FIGURE = re.compile(r"^(?P<name>.+?) (?P<op><=|>=|==|<|>) (?P<bound>-?[\d.]+)$")
STATUS = re.compile(r"\b[1-5](?:\d\d|xx)\b")


def page() -> str:
    return PAGE.read_text()


def prefixes(text: str) -> dict[str, str]:
    """The page's abbreviations: "`P` is `tests/...`" or "`F` `tests/...`" in one sentence."""
    return dict(re.findall(r"`([A-Z])` (?:is )?`(tests/[\w/]+\.py)`", text))


def rows(text: str) -> list[list[str]]:
    """Every table row above the generated table, as its cells (header and rule rows left out)."""
    body = text.split(BEGIN)[0]
    out = []
    for line in body.splitlines():
        if not line.startswith("|") or set(line) <= set("|-: "):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] in ("promise", "what", "measured"):
            continue
        out.append(cells)
    return out


def refs_of(cell: str, abbreviations: dict[str, str]) -> list[tuple[str, str | None]]:
    """(file, test name or None) of every test a cell cites."""
    found = []
    for token in re.findall(r"`([^`]+)`", cell):
        match = REF.match(token)
        if match is None:
            continue
        path = match["path"] or abbreviations.get(match["prefix"] or "")
        assert path is not None, f"unknown abbreviation in {token!r}"
        found.append((path, match["name"]))
    return found


@functools.cache
def collected(paths: tuple[str, ...]) -> frozenset[str]:
    """The test ids pytest collects in these files (parametrized ids without their brackets),
    those of the own targets too (`-m ""`: the soak is cited, and `make soak` runs it)."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-m", "", *paths],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return frozenset(line.split("[")[0] for line in done.stdout.splitlines() if "::" in line)


@functools.cache
def asserted_figures(path: str) -> frozenset[tuple[str, str, float]]:
    """(name, op, bound) of every figures.within call with a literal name in a test module."""
    module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
    tree = ast.parse((ROOT / path).read_text())
    out = set()
    for node in ast.walk(tree):
        call = node if isinstance(node, ast.Call) else None
        if call is None or not isinstance(call.func, ast.Attribute) or call.func.attr != "within":
            continue
        if not (isinstance(call.func.value, ast.Name) and call.func.value.id == "figures"):
            continue
        name, _, op, bound = call.args
        if not isinstance(name, ast.Constant):
            continue
        value = eval(compile(ast.Expression(bound), path, "eval"), vars(module))
        out.add((name.value, ast.literal_eval(op), float(value)))
    return frozenset(out)


def every_asserted_figure() -> set[tuple[str, str, float]]:
    modules = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py"))
    return {
        f for path in modules if "figures.within" in (ROOT / path).read_text() for f in asserted_figures(path)
    }


def test_the_page_cites_tests_and_abbreviations_it_defines():
    text = page()
    abbreviations = prefixes(text)
    assert {"P", "F", "Z", "S", "E", "L"} <= set(abbreviations), abbreviations
    cited = [ref for row in rows(text) for cell in row for ref in refs_of(cell, abbreviations)]
    assert len(cited) >= 40, "the page cites fewer tests than it did: was a table lost?"
    for path, _ in cited:
        assert (ROOT / path).is_file(), f"docs/guarantees.md cites {path}, which does not exist"


def test_every_cited_test_is_collected():
    text = page()
    abbreviations = prefixes(text)
    cited = {ref for row in rows(text) for cell in row for ref in refs_of(cell, abbreviations)}
    paths = tuple(sorted({path for path, _ in cited}))
    ids = collected(paths)
    missing = sorted(f"{path}::{name}" for path, name in cited if name and f"{path}::{name}" not in ids)
    assert not missing, f"docs/guarantees.md cites tests pytest does not collect: {missing}"
    empty = sorted(path for path, name in cited if name is None and not any(i.startswith(path) for i in ids))
    assert not empty, f"docs/guarantees.md cites modules with no test: {empty}"


def test_every_quoted_figure_is_asserted_by_a_test_of_its_row():
    text = page()
    abbreviations = prefixes(text)
    quoted = 0
    for cells in rows(text):
        refs = [ref for cell in cells for ref in refs_of(cell, abbreviations)]
        last = cells[-1]
        spans = re.findall(r"`([^`]+)`", last)
        figures = [m for m in (FIGURE.match(t) for t in spans if not REF.match(t)) if m is not None]
        loose = last
        for span in spans:
            if REF.match(span) or FIGURE.match(span):
                loose = loose.replace(f"`{span}`", "")
        assert not re.search(r"\d", STATUS.sub("", loose)), f"a number no test asserts is quoted: {last!r}"
        asserted = {f for path, _ in refs for f in asserted_figures(path)}
        for match in figures:
            figure = (match["name"], match["op"], float(match["bound"]))
            assert figure in asserted, (
                f"{cells[0]!r} quotes `{match[0]}`, which no test of its row asserts "
                f"(they assert: {sorted(asserted)})"
            )
            quoted += 1
    assert quoted >= 15, quoted


def test_the_figures_table_is_generated_and_lists_what_the_tests_assert():
    text = page()
    assert BEGIN in text and END in text
    table = text.split(BEGIN)[1].split(END)[0]
    assert "Generated by `python -m tests.support.figures --update`" in table, "the table is not generated"
    listed = set()
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0] not in ("measured", "---"):
            op, bound = cells[2].split(" ")
            listed.add((cells[0], op, float(bound)))
    expected = every_asserted_figure()
    assert listed == expected, (
        "the generated figures table is stale (run the replay and apiserver rungs, then "
        "`python -m tests.support.figures --update`): "
        f"missing {sorted(expected - listed)}, not asserted any more {sorted(listed - expected)}"
    )


def test_the_numbers_the_property_section_quotes_are_the_tests():
    from tests.replay import test_properties

    text = page()
    cases = re.search(r"contain\s+each of ([\d,]+) named cases", text)
    assert cases is not None
    assert int(cases[1].replace(",", "")) == len(test_properties.EVERY_CASE)
    coverage = re.search(r"([\d,]+) generated scenarios contain", text)
    assert coverage is not None and int(coverage[1].replace(",", "")) == test_properties.COVERAGE_EXAMPLES
    examples = re.search(r"runs ([\d,]+) derandomized examples by default", text)
    assert examples is not None
    assert int(examples[1].replace(",", "")) == int(test_properties.EXAMPLES_DEFAULT)


@pytest.mark.parametrize("word", ["Not generated yet", "KNOWN BUG", "tolerated"])
def test_the_page_promises_no_tolerance_and_no_placeholder(word):
    assert word not in page()
