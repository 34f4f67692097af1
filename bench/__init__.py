"""podsweeper's benchmarks: `python -m bench` (`make bench`) writes docs/benchmarks.md.

Not part of the test suite: nothing here asserts on time. Each figure is measured next to
its baseline in the same run and reported as a ratio (see bench/__main__.py).
"""
