"""docs/findings.md stays true: every rule with its title, settings and advice, every
threshold setting with its default, unit and source, every GPU of the catalog with its price,
and every severity."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tunescope.analyze import (
    GPU_CATALOG,
    RULES,
    SEVERITIES,
    FindingSettings,
    RuleInfo,
    describe_catalog,
    setting_info,
)

DOC = (Path(__file__).resolve().parents[1] / "docs" / "findings.md").read_text(encoding="utf-8")


def _section(key: str) -> str:
    m = re.search(rf"^## `{re.escape(key)}` — (.+)$", DOC, re.M)
    assert m, f"rule {key} has no section in docs/findings.md"
    return DOC[m.end() :].split("\n## ", 1)[0]


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.key)
def test_every_rule_is_documented_with_its_settings_and_advice(rule: RuleInfo) -> None:
    m = re.search(rf"^## `{re.escape(rule.key)}` — (.+)$", DOC, re.M)
    assert m and m.group(1) == rule.title
    body = _section(rule.key)
    for name in rule.settings:
        assert f"`{name}`" in body, f"{rule.key}: setting {name} not in its section"
    for advice in rule.advice:
        assert f"- {advice}" in body, f"{rule.key}: advice not in its section: {advice}"
    assert "Source" in body and "Span" in body and "Selects" in body


def test_the_documented_rules_are_exactly_the_rules() -> None:
    documented = set(re.findall(r"^## `([a-z_]+)` — ", DOC, re.M))
    assert documented == {r.key for r in RULES}


def test_every_setting_has_a_row_with_default_unit_and_source() -> None:
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `(\w+)` \|.*$", DOC, re.M)}
    for s in setting_info():
        assert s.name in rows, f"setting {s.name} missing from the settings table"
        cells = [c.strip() for c in rows[s.name].strip("|").split("|")]
        assert cells[1] == f"{s.default:g}", (s.name, cells[1])
        assert cells[2] == s.unit and cells[3] == s.help and cells[4] == s.source
    names = {f.name for f in dataclasses.fields(FindingSettings)}
    assert names == {s.name for s in setting_info()}
    table = DOC.split("## Settings", 1)[1]
    assert set(re.findall(r"^\| `(\w+)` \|", table, re.M)) == names


def test_every_rule_setting_exists() -> None:
    names = {f.name for f in dataclasses.fields(FindingSettings)}
    for r in RULES:
        assert set(r.settings) <= names, r.key
    assert {n for r in RULES for n in r.settings} == names  # none unused


def test_every_catalog_gpu_is_documented_with_its_price() -> None:
    for g in describe_catalog():
        row = re.search(rf"^\| `{re.escape(g['key'])}` \| (.+)$", DOC, re.M)
        assert row, f"GPU {g['key']} missing from the catalog table"
        assert f"| {g['price_per_hour']:.2f} |" in row.group(0)
        assert all(p in row.group(0) for p in g["mig"])
    assert len(GPU_CATALOG) == len(describe_catalog())


def test_every_severity_is_explained() -> None:
    for sev in SEVERITIES:
        assert re.search(rf"^- `{sev}`: ", DOC, re.M), sev


def test_the_report_command_and_its_options_are_documented() -> None:
    from tunescope.cli._report import report

    assert "tunescope report RUN" in DOC
    import typer

    app = typer.Typer(add_completion=False)
    app.command()(report)
    cmd = typer.main.get_command(app)
    for p in cmd.params:
        for o in p.opts:
            if o.startswith("--") and o != "--help":
                assert o in DOC, f"report option {o} not in docs/findings.md"


def test_importing_analyze_pulls_in_no_chart_library() -> None:
    code = (
        "import sys, tunescope.analyze\nprint('matplotlib' in sys.modules, 'torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["False", "False"]
