"""The Grafana dashboard (docs/grafana/toolprep.json) queries only metrics the daemon has.

Its panel expressions are PromQL over the names Prometheus gives the instruments that
``runtime/telemetry/instruments.py`` declares, so a renamed or dropped instrument (or a typo
in the dashboard) fails here instead of leaving an empty panel in someone's Grafana.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from toolprep.runtime.telemetry.instruments import INSTRUMENTS, SESSIONS_LIVE, InstrumentSpec

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "toolprep.json"

_UNIT_SUFFIXES = {"s": "_seconds", "By": "_bytes"}
"""The exporter's unit suffixes; annotation units (``{turn}``) add none."""
_OTHER_METRICS = re.compile(r"(process_\w+|up)")
"""The client library's process collector and Prometheus's own ``up``."""

_PROMQL_WORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless"}
    | {"offset", "le", "inf", "nan"}
)
_IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def prometheus_names(spec: InstrumentSpec) -> set[str]:
    """The series names Prometheus shows for ``spec``: dots become underscores, a unit
    suffix unless the name already ends with it, ``_total`` on counters, and a histogram's
    three series."""
    base = spec.name.replace(".", "_")
    suffix = _UNIT_SUFFIXES.get(spec.unit, "")
    if not base.endswith(suffix):
        base += suffix
    if spec.kind in ("counter", "observable_counter"):
        return {base + "_total"}
    if spec.kind == "histogram":
        return {base + "_bucket", base + "_sum", base + "_count"}
    return {base}


def metric_names(expression: str) -> set[str]:
    """The series names an expression selects: the identifiers left once strings, label
    matchers, ranges, grouping lists and function calls are taken out."""
    bare = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expression)
    bare = re.sub(r"\{[^}]*\}", " ", bare)
    bare = re.sub(r"\[[^\]]*\]", " ", bare)
    bare = re.sub(r"\b(?:by|without|on|ignoring)\s*\([^)]*\)", " ", bare)
    bare = re.sub(r"[A-Za-z_]\w*\s*\(", "(", bare)
    return {
        word
        for word in _IDENTIFIER.findall(bare)
        if word.lower() not in _PROMQL_WORDS and not word.startswith("$")
    }


def _dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return loaded


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def _expressions() -> list[str]:
    return [
        target["expr"]
        for panel in _panels(_dashboard()["panels"])
        for target in panel.get("targets", [])
        if "expr" in target
    ]


def test_the_name_rules_match_what_the_exporter_writes() -> None:
    by_name = {spec.name: spec for spec in INSTRUMENTS}
    assert prometheus_names(by_name["toolprep.turns"]) == {"toolprep_turns_total"}
    assert prometheus_names(by_name["toolprep.send_buffer.bytes"]) == {"toolprep_send_buffer_bytes"}
    assert "toolprep_card_preparing_latency_seconds_bucket" in prometheus_names(
        by_name["toolprep.card.preparing.latency"]
    )
    assert prometheus_names(by_name["gen_ai.client.token.usage"]) >= {
        "gen_ai_client_token_usage_sum"
    }


def test_the_expression_parser_finds_the_metrics_only() -> None:
    expression = (
        'histogram_quantile(0.99, sum by (le, gen_ai_tool_name) (rate(a_seconds_bucket{job=~"$job",'
        'x="y z"}[$__rate_interval]))) or vector(0) + on (job) up'
    )
    assert metric_names(expression) == {"a_seconds_bucket", "up"}


def test_every_panel_queries_a_declared_metric() -> None:
    declared = set().union(*(prometheus_names(spec) for spec in INSTRUMENTS))
    expressions = _expressions()
    assert len(expressions) >= 20
    unknown = {
        name
        for expression in expressions
        for name in metric_names(expression)
        if name not in declared and not _OTHER_METRICS.fullmatch(name)
    }
    assert not unknown, f"the dashboard queries metrics the daemon does not have: {unknown}"


def test_every_series_is_filtered_by_the_job_variable() -> None:
    for expression in _expressions():
        selectors = re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*\{([^}]*)\}", expression)
        assert selectors, expression
        assert all('job=~"$job"' in selector for selector in selectors), expression


def test_the_data_source_and_job_are_template_variables() -> None:
    dashboard = _dashboard()
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["DS_PROMETHEUS"]["type"] == "datasource"
    assert variables["DS_PROMETHEUS"]["query"] == "prometheus"
    assert variables["job"]["type"] == "query"
    # The jobs are listed from a gauge the daemon serves from its start, before any turn.
    listed = re.fullmatch(r"label_values\((\w+), job\)", variables["job"]["definition"])
    assert listed is not None
    assert listed.group(1) in prometheus_names(SESSIONS_LIVE)
    for panel in _panels(dashboard["panels"]):
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}


def test_every_instrument_has_a_panel() -> None:
    used = set().union(*(metric_names(expression) for expression in _expressions()))
    missing = [spec.name for spec in INSTRUMENTS if not prometheus_names(spec) & used]
    assert not missing, f"instruments without a panel in the dashboard: {missing}"
