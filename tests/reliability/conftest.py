"""Reliability suite: the figures summary at the end of the run."""

from __future__ import annotations

from tests.reliability import figures


def pytest_terminal_summary(terminalreporter):
    if figures.FIGURES or figures.MEASURED:
        terminalreporter.section("podsweeper reliability figures")
        for name, value in figures.snapshot().items():
            terminalreporter.write_line(f"{name}: {value}")
        figures.write()
        terminalreporter.write_line(f"(written to {figures.OUT})")
