"""The Grafana dashboard (packaging/grafana/) against a real controller's `/metrics`: every
metric its PromQL names, and every label it matches or groups on, is one the controller
exports, so no panel stays empty for a name the exporter never had. The expressions are read
by a small tokenizer: functions, aggregations and their `by (...)` label lists, keywords,
strings, ranges and numbers are skipped; what is left are metric names."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.cluster import Cluster

DASHBOARD = Path(__file__).parents[2] / "packaging" / "grafana" / "xce-cluster.json"

TOKEN = re.compile(
    r"""\s*(?:
      (?P<string>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*')
    | (?P<matchers>\{[^}]*\})
    | (?P<range>\[[^\]]*\])
    | (?P<number>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)
    | (?P<name>[A-Za-z_:][A-Za-z0-9_:]*)
    | (?P<op>=~|!~|==|!=|>=|<=|[-+*/%^<>(),=])
    )""",
    re.VERBOSE,
)
# keywords followed by a parenthesised list of labels
GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}
KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}
# the PromQL functions and aggregations the dashboard may call: a misspelt one fails too
FUNCTIONS = {
    "sum",
    "avg",
    "min",
    "max",
    "count",
    "topk",
    "bottomk",
    "rate",
    "irate",
    "increase",
    "delta",
    "deriv",
    "clamp_min",
    "clamp_max",
    "histogram_quantile",
    "max_over_time",
    "avg_over_time",
    "time",
    "timestamp",
}
MATCHER = re.compile(r"""\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)\s*(?:"(?:\\.|[^"\\])*")""")


def tokens(expr: str) -> list[tuple[str, str]]:
    """(kind, text) of each token of `expr`; anything else fails the test."""
    out: list[tuple[str, str]] = []
    at = 0
    expr = expr.rstrip()
    while at < len(expr):
        m = TOKEN.match(expr, at)
        assert m is not None and m.end() > at, f"cannot read {expr[at:]!r} in {expr!r}"
        kind = m.lastgroup
        assert kind is not None
        out.append((kind, m.group(kind)))
        at = m.end()
    return out


def selectors(expr: str) -> list[tuple[str, list[str]]]:
    """The metric names `expr` selects, each with the labels it matches on; the labels of
    `by (...)` lists come under the name "" (checked against every metric of `expr`)."""
    found: list[tuple[str, list[str]]] = []
    toks = tokens(expr)
    i = 0
    while i < len(toks):
        kind, text = toks[i]
        following = toks[i + 1] if i + 1 < len(toks) else ("", "")
        if kind == "name" and text in GROUPING:
            assert following == ("op", "("), f"{text} without a label list in {expr!r}"
            close = next(j for j in range(i + 2, len(toks)) if toks[j] == ("op", ")"))
            found.append(("", [t for k, t in toks[i + 2 : close] if k == "name"]))
            i = close + 1
            continue
        if kind == "name" and text in KEYWORDS:
            i += 1
            continue
        if kind == "name" and following == ("op", "("):
            assert text in FUNCTIONS, f"unknown function {text}() in {expr!r}"
            i += 1
            continue
        if kind == "name" and text in FUNCTIONS and following[1] in GROUPING:
            i += 1  # an aggregation with its grouping first: `sum by (le) (...)`
            continue
        if kind == "name":
            labels: list[str] = []
            if following[0] == "matchers":
                inner = following[1][1:-1]
                labels = [m.group(1) for m in MATCHER.finditer(inner)]
                assert MATCHER.sub("", inner).replace(",", "").strip() == "", inner
            found.append((text, labels))
        i += 1
    return found


def exported(text: str) -> dict[str, set[str]]:
    """Each series name the exporter declares or serves, with the labels its samples carry:
    a histogram's `_bucket`, `_sum`, `_count`, a counter's `_total`, and families with no
    sample yet (a labelled metric no one has set) by their declaration alone."""
    names: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}
        for suffix in suffixes.get(family.type, ("",)):
            names.setdefault(family.name + suffix, set())
        for sample in family.samples:
            names.setdefault(sample.name, set()).update(sample.labels)
    for name in [n for n in names if n.endswith("_bucket")]:
        names[name].add("le")
    return names


def _exprs(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (panel["title"], target["expr"])
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
    ]


def test_the_tokenizer_reads_names_not_functions_labels_or_ranges() -> None:
    expr = (
        "histogram_quantile(0.95, sum by (le, route) (rate(xce_api_request_seconds_bucket"
        '{method="GET", route=~"/api/.*"}[$__rate_interval]))) / 2 and on (route) up'
    )
    assert selectors(expr) == [
        ("", ["le", "route"]),
        ("xce_api_request_seconds_bucket", ["method", "route"]),
        ("", ["route"]),
        ("up", []),
    ]
    with pytest.raises(AssertionError, match="unknown function"):
        selectors("rates(xce_jobs[5m])")


def test_every_metric_and_label_of_the_dashboard_is_exported(tmp_path: Path) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert all(p["gridPos"]["x"] + p["gridPos"]["w"] <= 24 for p in dashboard["panels"])
    assert all(
        t["datasource"]["uid"] == "${datasource}" for p in dashboard["panels"] for t in p["targets"]
    )
    c = Cluster(tmp_path / "c")
    c.start_controller()
    c.start_worker("w1", slots=2)
    try:
        job = c.submit(command="true")
        c.wait_state(job, "DONE")
        text = c.get("/metrics").decode()
    finally:
        c.stop()
    names = exported(text)
    assert "w1" in re.findall(r'xce_host_heartbeat_age_seconds\{host="([^"]+)"\}', text)
    missing, unlabelled = [], []
    for title, expr in _exprs(dashboard):
        chosen = selectors(expr)
        metrics = [name for name, _ in chosen if name]
        assert metrics, f"{title}: no metric in {expr!r}"
        for name, labels in chosen:
            if name and name not in names:
                missing.append(f"{title}: {name}")
                continue
            # a label matched on, or grouped by, must be one the metric's samples carry
            # (where it has samples yet)
            for metric in [name] if name else metrics:
                carried = names.get(metric, set())
                if carried:
                    unlabelled += [
                        f"{title}: {metric}{{{label}}}" for label in labels if label not in carried
                    ]
    assert not missing, f"not exported: {missing}"
    assert not unlabelled, f"labels not exported: {unlabelled}"
