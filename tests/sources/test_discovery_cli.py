"""Discovery mode through the CLI: `crank` suggests it for a catalog over its budget (catalog report, lint
finding, publish warning), `crank agent mode` sets it, and the next publish serves the three tools."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from crank.cli import main
from crank.sources.discovery import CALL_TOOL, SCHEMA_TOOL, SEARCH_TOOL


@pytest.fixture
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    for name in ("DATABASE_URL", "ADMIN_TOKEN", "LISTEN", "ROLE", "SETTINGS_FILE"):
        monkeypatch.delenv(f"CRANK_{name}", raising=False)
    monkeypatch.setenv("CRANK_DATA_DIR", str(tmp_path / "data"))
    return CliRunner()


def test_crank_suggests_discovery_mode_over_budget_and_sets_it(runner: CliRunner, tmp_path: Path) -> None:
    from crank.demo import CATALOG

    assert runner.invoke(main, ["apply", str(CATALOG)], env={"CRANK_DEMO_API": "http://shop.test"}).exit_code == 0
    (tmp_path / "tight.yaml").write_text("description: Books.\ntoken_budget: 100\nbindings: [{operation: get_book}]\n")
    assert runner.invoke(main, ["agent", "put", "demo", "tight", str(tmp_path / "tight.yaml")]).exit_code == 0

    report = runner.invoke(main, ["catalog", "demo"])
    assert "tight: about" in report.output and "crank agent mode demo tight discovery" in report.output
    linted = runner.invoke(main, ["lint", "demo", "tight"])
    assert "over-budget" in linted.output and "discovery mode" in linted.output
    published = runner.invoke(main, ["publish", "demo", "tight"])
    assert published.exit_code == 0 and "consider discovery mode" in published.output

    switched = runner.invoke(main, ["agent", "mode", "demo", "tight", "discovery"])
    assert switched.exit_code == 0 and "mode discovery" in switched.output
    assert '"mode": "discovery"' in runner.invoke(main, ["agent", "show", "demo", "tight"]).output
    again = runner.invoke(main, ["publish", "demo", "tight"])
    assert again.exit_code == 0 and "version 2" in again.output
    tools = runner.invoke(main, ["catalog", "demo"]).output.split("tight: about", 1)[1]
    assert all(name in tools for name in (SEARCH_TOOL, SCHEMA_TOOL, CALL_TOOL)) and "get_book" not in tools
    refused = runner.invoke(main, ["agent", "mode", "demo", "tight", "sideways"])
    assert refused.exit_code == 2 and "sideways" in refused.output


def test_a_catalog_file_sets_the_mode(runner: CliRunner, tmp_path: Path) -> None:
    (tmp_path / "catalog.yaml").write_text(
        "workspace: {slug: acme, name: Acme}\n"
        "operations:\n"
        "  get_record: {protocol: http, target: {url: 'http://u/records/{id}'}, description: Get one record.,\n"
        "               input_schema: {type: object, properties: {id: {type: string}}, required: [id]}}\n"
        "agents:\n"
        "  records: {description: Records, mode: discovery, bindings: [{operation: get_record}]}\n"
    )
    applied = runner.invoke(main, ["apply", str(tmp_path / "catalog.yaml")])
    assert applied.exit_code == 0, applied.output
    assert '"mode": "discovery"' in runner.invoke(main, ["agent", "show", "acme", "records"]).output
    (tmp_path / "bad.yaml").write_text((tmp_path / "catalog.yaml").read_text().replace("discovery", "sideways"))
    refused = runner.invoke(main, ["apply", str(tmp_path / "bad.yaml")])
    assert refused.exit_code == 1 and "agents.records.mode" in refused.output
