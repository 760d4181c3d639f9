"""A newer version of a real API description imported over the older one (issue 11, item 5): what was
added, removed and changed, which bound tools it breaks, one transaction that republishes the agents
concerned, `--dry-run`, an unchanged import, and an edited operation republished by one command.

The newer version is Mailchimp's pinned document (272 operations) changed by the test: one bound
operation removed, a required parameter added to another, a parameter's type changed in a third, and
one operation added."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from click.testing import CliRunner

from crank.admin.actions import publish_agent
from crank.admin.api import AdminAPI
from crank.admin.changes import reimport
from crank.admin.documents import load_document
from crank.cli import main
from crank.exceptions import ConfigurationError
from crank.registry import Registry
from tests.realapis import MAILCHIMP, require

BOUND = ("get_authorized_apps_id", "get_account_exports", "get_automations", "get_ping")
EXPECTED = [
    "+ get_ping_v2",
    "- get_authorized_apps_id",
    "~ get_account_exports",
    "    parameter status: added (string, required)",
    "~ get_automations",
    "    parameter count: type integer -> string",
    "BREAKING agent desk, tool get_authorized_apps_id: operation removed from the document (the tool is removed)",
    "BREAKING agent desk, tool get_account_exports: parameter status: added (string, required)",
    "BREAKING agent desk, tool get_automations: parameter count: type integer -> string",
]
DRAFTED = (
    "BREAKING agent drafted, tool get_authorized_apps_id: operation removed from the document (the tool is removed)"
)


@pytest.fixture(scope="module")
def versions() -> tuple[dict[str, Any], dict[str, Any]]:
    """Mailchimp's document as pinned, and a newer version derived from it."""
    older = load_document(str(require(MAILCHIMP)))
    newer = copy.deepcopy(older)
    paths = newer["paths"]
    del paths["/authorized-apps/{app_id}"]["get"]
    status = {"name": "status", "in": "query", "required": True, "schema": {"type": "string"}}
    paths["/account-exports"]["get"]["parameters"].append(status)
    (count,) = (param for param in paths["/automations"]["get"]["parameters"] if param.get("name") == "count")
    assert count["schema"]["type"] == "integer"  # what the real document says
    count["schema"] = {"type": "string"}
    paths["/ping/v2"] = copy.deepcopy(older["paths"]["/ping"])
    paths["/ping/v2"]["get"]["operationId"] = "getPingV2"
    return older, newer


def published_with_bindings(registry: Registry, older: dict[str, Any]) -> None:
    registry.put_workspace("mc", "Mailchimp")
    reimport(registry, "mc", "openapi", older)
    registry.put_agent("mc", "desk", {"description": "Exports and automations", "bindings": [
        {"operation": name} for name in BOUND]})  # fmt: skip
    registry.put_agent("mc", "monitor", {"bindings": [{"operation": "get_ping", "tool_name": "check_health"}]})
    registry.put_agent("mc", "drafted", {"bindings": [{"operation": "get_authorized_apps_id"}]})  # never published
    assert publish_agent(registry, "mc", "desk").version == 1
    assert publish_agent(registry, "mc", "monitor").version == 1


def test_a_newer_document_reports_changes_flags_broken_tools_and_republishes_in_one_transaction(
    registry: Registry, versions: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    older, newer = versions
    published_with_bindings(registry, older)
    drafts, generation = registry.operations("mc"), registry.generation()

    dry = reimport(registry, "mc", "openapi", newer, dry_run=True)
    assert dry.lines() == [*EXPECTED, DRAFTED, "would republish desk as version 2"]  # drafts are named too
    assert registry.operations("mc") == drafts and registry.generation() == generation  # nothing written
    assert registry.versions("mc", "desk") == [1]

    report = reimport(registry, "mc", "openapi", newer)
    assert report.lines() == [*EXPECTED, DRAFTED, "republished desk as version 2"]
    assert len(report.names) == 272 and report.published == {"desk": 2}
    assert registry.versions("mc", "desk") == [1, 2] and registry.versions("mc", "monitor") == [1]
    assert "get_authorized_apps_id" not in registry.operations("mc") and "get_ping_v2" in registry.operations("mc")
    assert [b["operation"] for b in registry.agent("mc", "desk")["bindings"]] == list(BOUND[1:])
    assert registry.agent("mc", "drafted")["bindings"] == []  # no binding to an operation that is gone
    (served,) = [agent for agent in registry.published() if agent.agent == "desk"]
    tools = {tool.tool_name: tool for tool in served.runtime.tools}
    assert sorted(tools) == sorted(BOUND[1:])
    assert "status" in tools["get_account_exports"].input_schema["required"]
    assert tools["get_automations"].input_schema["properties"]["count"]["type"] == "string"


def test_an_unchanged_import_reports_nothing_and_writes_nothing(
    registry: Registry, versions: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    older, _ = versions
    published_with_bindings(registry, older)
    generation = registry.generation()
    report = reimport(registry, "mc", "openapi", older)
    assert report.lines() == [] and not report.added and not report.removed and not report.changed
    assert len(report.unchanged) == 272 and report.published == {} and report.breaking == []
    assert registry.generation() == generation and registry.versions("mc", "desk") == [1]


def test_a_reimport_keeps_what_the_user_added_to_a_draft(
    registry: Registry, versions: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    older, newer = versions
    registry.put_workspace("mc", "Mailchimp")
    reimport(registry, "mc", "openapi", older, include=["getAutomations"])
    imported = registry.operation("mc", "get_automations")
    execution = {**imported["execution_config"], "timeout": 3}  # what it requires (basic auth) is the document's
    curated = {**imported, "output_mapping": {"select": "automations"}, "format": "markdown",
               "execution_config": execution}  # fmt: skip
    registry.put_operation("mc", "get_automations", curated)
    report = reimport(registry, "mc", "openapi", newer, include=["getAutomations"])
    assert [change.details for change in report.changed] == [("parameter count: type integer -> string",)]
    kept = registry.operation("mc", "get_automations")
    assert kept["output_mapping"] == {"select": "automations"} and kept["format"] == "markdown"
    assert kept["execution_config"] == execution and execution["requires"][0]["scheme"] == "basicAuth"
    assert kept["input_schema"]["properties"]["count"]["type"] == "string"


def test_an_agent_that_cannot_be_republished_leaves_everything_as_it_was(
    registry: Registry, versions: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    older, newer = versions
    published_with_bindings(registry, older)
    registry.put_agent("mc", "monitor", {"bindings": [
        {"operation": "get_automations", "tool_name": "no such name"}]})  # fmt: skip
    registry.publish("mc", "monitor")  # published without the check: the next publish's check fails
    drafts = registry.operations("mc")
    with pytest.raises(ConfigurationError, match="no such name"):
        reimport(registry, "mc", "openapi", newer)
    assert registry.operations("mc") == drafts and registry.versions("mc", "desk") == [1]
    assert len(registry.agent("mc", "desk")["bindings"]) == 4


def test_the_cli_reports_a_dry_run_then_imports_and_republishes_an_edited_operation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, versions: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    older, newer = versions
    for name in ("DATABASE_URL", "ADMIN_TOKEN", "LISTEN", "ROLE", "SETTINGS_FILE"):
        monkeypatch.delenv(f"CRANK_{name}", raising=False)
    monkeypatch.setenv("CRANK_DATA_DIR", str(tmp_path / "data"))
    (tmp_path / "v1.json").write_text(json.dumps(older))
    (tmp_path / "v2.json").write_text(json.dumps(newer))
    runner = CliRunner()

    def crank(*args: str) -> str:
        result = runner.invoke(main, list(args), catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.output

    crank("workspace", "create", "mc")
    first = crank("import", "openapi", str(tmp_path / "v1.json"), "-w", "mc")
    assert "imported 272 operations into mc: 272 added, 0 removed, 0 changed" in first
    for name in BOUND:
        crank("agent", "bind", "mc", "desk", name)
    crank("agent", "bind", "mc", "monitor", "get_ping")
    crank("publish", "mc", "desk")
    crank("publish", "mc", "monitor")

    dry = crank("import", "openapi", str(tmp_path / "v2.json"), "-w", "mc", "--dry-run").splitlines()
    assert all(line in dry for line in EXPECTED)
    assert "would republish desk as version 2" in dry
    assert "dry run: 1 added, 1 removed, 2 changed, 269 unchanged; nothing written" in dry
    assert crank("versions", "mc", "desk").startswith("* 1\t")

    done = crank("import", "openapi", str(tmp_path / "v2.json"), "-w", "mc").splitlines()
    assert all(line in done for line in EXPECTED) and "republished desk as version 2" in done
    again = crank("import", "openapi", str(tmp_path / "v2.json"), "-w", "mc").splitlines()
    assert "mc: no changes (272 operations as imported before)" in again
    # Mailchimp's document declares basic auth, and the workspace has no credential for it: said every time.
    assert again[-1].startswith("credentials: basicAuth (basic) is required by 272 operation(s)")

    # Editing an operation republishes every published agent that binds it, in one command.
    edited = {**json.loads(crank("operation", "show", "mc", "get_ping")), "description": "Check the API is up."}
    (tmp_path / "ping.yaml").write_text(yaml.safe_dump(edited))
    out = crank("operation", "put", "mc", "get_ping", str(tmp_path / "ping.yaml"), "--republish")
    assert "published mc/desk version 3" in out and "published mc/monitor version 2" in out
    assert crank("operation", "republish", "mc", "get_ping").splitlines() == [
        "mc/desk: unchanged",
        "mc/monitor: unchanged",
    ]
    assert crank("operation", "republish", "mc", "get_ping_v2").strip() == "no published agent binds get_ping_v2"


@pytest.mark.anyio
async def test_the_admin_api_reports_an_import_and_republishes_an_operation(
    registry: Registry, serve: Callable[..., str], versions: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    older, newer = versions
    published_with_bindings(registry, older)
    token = "admin-token-for-tests-0123456789"
    base = serve(AdminAPI(registry, token=token)) + "/admin/v1/workspaces/mc"
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as admin:
        body = {"format": "openapi", "document": newer, "dry_run": True}
        report = (await admin.post(base + "/imports", json=body)).json()
        assert report["dry_run"] is True and report["added"] == ["get_ping_v2"]
        assert report["removed"] == ["get_authorized_apps_id"] and report["published"] == {"desk": 2}
        assert {(b["agent"], b["tool"]) for b in report["breaking"]} == {
            ("desk", "get_authorized_apps_id"), ("desk", "get_account_exports"), ("desk", "get_automations"),
            ("drafted", "get_authorized_apps_id"),
        }  # fmt: skip
        assert registry.versions("mc", "desk") == [1]
        republished = await admin.post(base + "/operations/get_ping/republish")
        assert republished.status_code == 200 and republished.json()["unchanged"] == ["desk", "monitor"]
        missing = await admin.post(base + "/operations/nothing/republish")
        assert missing.status_code == 404


def test_each_kind_of_change_is_named_and_only_the_breaking_ones_flagged() -> None:
    from crank.admin.changes import compare_operations, merge_draft

    def op(**fields: Any) -> dict[str, Any]:
        schema = {"type": "object", "properties": fields.pop("properties", {}), "required": fields.pop("required", [])}
        return {"protocol": "http", "target": {"method": "GET", "url": "https://a.test/x"}, "input_schema": schema,
                "input_mapping": [], **fields}  # fmt: skip

    old = op(properties={"a": {"type": "integer"}, "b": {"$ref": "#/$defs/Pet"}, "c": {"anyOf": [{"type": "string"}]},
                         "d": {"enum": [1]}, "e": {}, "f": {"type": ["string", "null"]}, "g": {"type": "string"}},
             required=["a", "g"], note="mine")  # fmt: skip
    new = op(properties={"a": {"type": "integer"}, "b": {"$ref": "#/$defs/Pet"}, "c": {"anyOf": [{"type": "string"}]},
                         "d": {"enum": [1]}, "e": {}, "f": {"type": "array", "items": {"type": "string"}},
                         "g": {"type": "string"}, "h": {"type": "boolean"}},
             required=["g", "e"], note="yours", target={"method": "POST", "url": "https://a.test/y"},
             description="new")  # fmt: skip
    change = compare_operations("x", old, new)
    assert change is not None and change.details == (
        "target: GET https://a.test/x -> POST https://a.test/y",
        "parameter a: now optional",
        "parameter e: now required",
        "parameter f: type null|string -> array of string",
        "parameter h: added (boolean)",
        "description changed",
        "note changed",
    )
    assert change.breaking == ("parameter e: now required", "parameter f: type null|string -> array of string")
    assert compare_operations("x", old, old) is None
    moved = compare_operations("x", op(), op(input_mapping=[{"from": "q", "to": "header.q"}]))
    assert moved is not None and moved.details == ("input mapping changed",)
    assert merge_draft(None, new) is new
    assert merge_draft({**old, "execution_config": {"timeout": 3}}, {**new, "execution_config": {"idempotency": {
        "argument": "k"}}})["execution_config"] == {"timeout": 3, "idempotency": {"argument": "k"}}  # fmt: skip


def test_an_operation_that_a_newer_document_makes_uncallable_is_skipped_and_kept_as_it_was(
    registry: Registry, versions: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    """A bound operation whose body becomes one Crank cannot send is skipped by the new import, reported, and
    neither deleted nor unbound: the agent goes on serving it as published."""
    older, _ = versions
    published_with_bindings(registry, older)
    newer = copy.deepcopy(older)
    exports = newer["paths"]["/account-exports"]
    exports["get"]["requestBody"] = {"required": True, "content": {"text/xml": {"schema": {"type": "object"}}}}
    report = reimport(registry, "mc", "openapi", newer)
    assert [skipped.name for skipped in report.skipped] == ["get_account_exports"]
    assert "get_account_exports" not in report.removed and report.breaking == []
    assert "get_account_exports" in registry.operations("mc")
    assert {"operation": "get_account_exports"} in registry.agent("mc", "desk")["bindings"]


def test_a_body_the_document_no_longer_sends_as_a_form_is_no_longer_a_form() -> None:
    """How the body is written is the document's, as what it requires is: a re-import replaces it (and drops it when
    the body became JSON), while the user's own execution settings stay."""
    from crank.admin.changes import merge_draft

    old = {"execution_config": {"timeout": 30, "body": {"content_type": "application/x-www-form-urlencoded"}}}
    assert merge_draft(old, {"protocol": "http"})["execution_config"] == {"timeout": 30}
    new = {"execution_config": {"body": {"content_type": "multipart/form-data", "files": ["file"]}}}
    assert merge_draft(old, new)["execution_config"] == {"timeout": 30, **new["execution_config"]}
