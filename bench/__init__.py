"""podsweeper's benchmarks: `python -m bench` (`make bench`) writes docs/benchmarks.md.

Not part of the test suite: nothing here asserts on time. Each figure is measured next to
its baseline in the same run and reported as a ratio, judged against the goal beside it.

    __main__.py     the runner: which figures, in which scene, the table, met/missed, exit status
    figures/        one module per figure: its method (docstring), baseline and GOAL
    measure.py      the shared measurements (live path vs json.loads, /proc CPU, the API
                    server's counters, a pod watch, a sink's count)
    scenes.py       set-ups several figures measure in (3-4; 8 and 10)
    report.py       Row, Goal, the table and docs/benchmarks.md
    stream.py, memapi.py, loadgen.py, served.py, noop_main.py, floor.py (+ floor/, Go)
                    the workloads and baselines the figures drive
    profile.py, passprofile.py, edgeprofile.py
                    profilers (figure 1's section; `python -m bench.passprofile`, `.edgeprofile`)
    harness.py, cluster.py
                    the only modules importing `tests` (import-linter holds it): their
                    docstrings list the test harness's entry points the bench uses
"""
