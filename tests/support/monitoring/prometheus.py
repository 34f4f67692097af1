"""A real Prometheus (tests/support/monitoring/build.py) on loopback, and the queries the shipped files hold.

`Prometheus(targets=[...])` writes a config that scrapes each `host:port` every second
(`/metrics`), starts the server on a free loopback port with a temporary data directory, and
waits (bounded) for `/-/ready`; `stop()` ends its process group and removes the directory.
`query(expr)` is `/api/v1/query`, the HTTP API Grafana's Prometheus data source and the rule
manager both evaluate through.

`dashboard_queries()` and `alert_expressions()` read knative/monitoring/ as a user loads it;
`grafana_expr()` fills in the Grafana variables the dashboard uses, as Grafana would before
sending a query.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import requests
import yaml

from tests.support.harness.ports import free_port
from tests.support.harness.processes import Process, answers_ok

ROOT = Path(__file__).resolve().parents[3]
MONITORING = ROOT / "knative" / "monitoring"
DASHBOARD = MONITORING / "dashboard.json"
ALERTS = MONITORING / "alerts.yaml"


class PrometheusError(RuntimeError):
    """Prometheus exited or never became ready; the message carries its log tail."""


@dataclass(frozen=True)
class Query:
    where: str  # "panel 'title' A", "variable namespace", "alert Name"
    expr: str


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def alert_rules() -> list[dict]:
    return [rule for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]]


def panels(board: dict | None = None) -> list[dict]:
    """Every panel, rows' nested panels included."""
    found = []
    for panel in (board or dashboard())["panels"]:
        found.append(panel)
        found.extend(panel.get("panels") or [])
    return found


def dashboard_queries(board: dict | None = None) -> list[Query]:
    board = board or dashboard()
    queries = [
        Query(f"panel {panel['title']!r} {target['refId']}", target["expr"])
        for panel in panels(board)
        for target in panel.get("targets") or []
    ]
    return queries


def variable_queries(board: dict | None = None) -> list[tuple[str, str]]:
    """(name, query) of each query variable, e.g. `label_values({...}, namespace)`."""
    found = []
    for var in (board or dashboard())["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            found.append((var["name"], query))
    return found


def alert_expressions() -> list[Query]:
    return [Query(f"alert {rule['alert']}", rule["expr"]) for rule in alert_rules() if "alert" in rule]


# What Grafana puts in place of its variables (with "All" selected for the namespace, whose
# allValue is ".*"). $__rate_interval is at least four scrape intervals: 15 s here suits the
# 1 s scrapes of the live test and still spans several samples.
GRAFANA_VARIABLES = {
    "$__rate_interval": "15s",
    "$__interval": "1s",
    "$__range": "5m",
    "$namespace": ".*",
}


def grafana_expr(expr: str, variables: dict[str, str] | None = None) -> str:
    variables = {**GRAFANA_VARIABLES, **(variables or {})}
    # Longest names first, so $__range is not mistaken for a prefix of another name.
    for name in sorted(variables, key=len, reverse=True):
        expr = expr.replace(name, variables[name])
    left = re.findall(r"\$\{?\w+", expr)
    if left:
        raise ValueError(f"unknown Grafana variable(s) {left} in {expr!r}")
    return expr


LABEL_VALUES = re.compile(r"^label_values\((?:(?P<selector>.+),\s*)?(?P<label>\w+)\)$")


class Prometheus(Process):
    def __init__(self, binary: Path, targets: list[str] = (), *, scrape_interval: str = "1s"):
        self.binary = Path(binary)
        self.targets = list(targets)
        self.scrape_interval = scrape_interval
        self.workdir = Path(tempfile.mkdtemp(prefix="podsweeper-prometheus-"))
        super().__init__("prometheus", self.workdir / "prometheus.log", error=PrometheusError)
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Prometheus:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self, timeout: float = 60.0) -> Prometheus:
        config = {
            "global": {"scrape_interval": self.scrape_interval, "evaluation_interval": self.scrape_interval},
            "scrape_configs": [
                {
                    "job_name": "podsweeper",
                    "scrape_timeout": self.scrape_interval,
                    "metrics_path": "/metrics",
                    "static_configs": [{"targets": self.targets}],
                }
            ],
        }
        (self.workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.port = free_port()
        self.launch(
            [
                str(self.binary),
                f"--config.file={self.workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            cwd=self.workdir,
        )
        try:
            self.wait("answer /-/ready", lambda: answers_ok(f"{self.url}/-/ready"), timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout: float | None = None) -> int | None:
        """Its process group, then its data directory."""
        code = super().stop(timeout)
        shutil.rmtree(self.workdir, ignore_errors=True)
        return code

    def query(self, expr: str) -> dict:
        """The JSON answer of an instant query (status "success" or "error", never raised)."""
        response = requests.post(f"{self.url}/api/v1/query", data={"query": expr}, timeout=30)
        return response.json()

    def label_values(self, query: str) -> dict:
        """A Grafana `label_values([selector,] label)` variable query, as Grafana sends it."""
        match = LABEL_VALUES.match(query.strip())
        if match is None:
            raise ValueError(f"not a label_values() query: {query!r}")
        params = {"match[]": match["selector"]} if match["selector"] else {}
        response = requests.get(f"{self.url}/api/v1/label/{match['label']}/values", params=params, timeout=30)
        return response.json()

    def wait_for(self, expr: str, *, timeout: float, what: str = "") -> list[dict]:
        """Poll an instant query until it returns a non-empty vector; its result, or raise."""
        deadline = time.monotonic() + timeout
        answer: dict = {}
        while time.monotonic() < deadline:
            answer = self.query(expr)
            if answer.get("status") == "success" and answer["data"]["result"]:
                return answer["data"]["result"]
            if not self.alive():
                break
            time.sleep(0.5)
        raise PrometheusError(
            f"no result for {what or expr!r} after {timeout:.0f}s (last answer {answer}):\n{self.tail()}"
        )
