"""Every YAML Crank reads goes through crank._yaml: aliases budgeted, nesting bounded, one-line errors."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import yaml
from click.testing import CliRunner

from crank import _yaml
from crank.admin.api import AdminAPI
from crank.admin.apply import load_catalog_file
from crank.cli import main
from crank.exceptions import ApplyError
from crank.registry import Registry


def billion_laughs(levels: int = 9) -> str:
    """A few hundred bytes that expand to 9**levels strings when the aliases are written out."""
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for level in range(1, levels):
        lines.append(f"a{level}: &a{level} [" + ", ".join([f"*a{level - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def deep(levels: int) -> str:
    return "".join(" " * level + f"k{level}:\n" for level in range(levels)) + " " * levels + "leaf\n"


def test_aliases_within_the_budget_and_plain_data_load() -> None:
    assert _yaml.load("x: &a {k: v}\ny: *a\nwhen: 2020-01-01\n1: one\n") == {
        "x": {"k": "v"}, "y": {"k": "v"}, "when": "2020-01-01", "1": "one"}  # fmt: skip
    assert _yaml.load("") is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (billion_laughs(), "aliases expand the document"),
        ("a: &x [1, *x]\n", "contains it"),
        (deep(_yaml.MAX_DEPTH + 5), "nested more than"),
        (deep(5000), "nest"),  # libyaml stops it first, at 1,000 levels
        ("!!python/object/apply:os.system ['true']\n", "could not determine a constructor"),
    ],
)
def test_dangerous_documents_are_refused(text: str, message: str) -> None:
    with pytest.raises(yaml.YAMLError, match=message):
        _yaml.load(text)


def test_the_cli_import_refuses_a_billion_laughs_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRANK_DATA_DIR", str(tmp_path / "data"))
    spec = tmp_path / "laughs.yaml"
    spec.write_text("openapi: 3.0.3\n" + billion_laughs())
    runner = CliRunner()
    assert runner.invoke(main, ["workspace", "create", "ws"]).exit_code == 0
    result = runner.invoke(main, ["import", "openapi", str(spec), "-w", "ws"])
    assert result.exit_code != 0
    assert "aliases expand the document" in result.output and "Traceback" not in result.output


def test_a_catalog_file_with_a_billion_laughs_is_an_apply_error(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text("workspace: {slug: ws, name: WS}\n" + billion_laughs())
    with pytest.raises(ApplyError, match="aliases expand the document"):
        load_catalog_file(catalog)


def test_the_admin_api_answers_dangerous_yaml_bodies_with_400(registry: Registry, serve: Callable[..., str]) -> None:
    token = "t" * 32
    base = serve(AdminAPI(registry, token=token)) + "/admin/v1"
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/yaml"}
    for body in (billion_laughs(), deep(10_000)):
        response = httpx.post(base + "/apply", content=body, headers=headers)
        assert response.status_code == 400, response.text
        assert response.json()["error"]["code"] == "bad_request"


def test_a_lower_nesting_limit_can_be_asked_for() -> None:
    assert _yaml.load(deep(20), max_depth=21) is not None
    with pytest.raises(_yaml.YAMLLimitError, match="nested more than 20 levels deep"):
        _yaml.load(deep(20), max_depth=20)


def test_an_admin_yaml_body_is_nested_no_deeper_than_a_json_one(registry: Registry, serve: Callable[..., str]) -> None:
    """Found by tests/test_fuzz.py: a YAML body within YAML's own limit but deeper than JSON can be written out was
    stored, and its answer (and every later read of the operation) was a plain-text 500."""
    token = "t" * 32
    base = serve(AdminAPI(registry, token=token)) + "/admin/v1"
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/yaml"}
    registry.create_workspace("acme", "Acme")
    schema = "[" * 252 + "]" * 252  # the operation's answer nests it 3 levels deeper: past what orjson writes (255)
    body = '{"protocol": "http", "target": {"url": "http://127.0.0.1:9/x"}, "input_schema": {"x": ' + schema + "}}"
    response = httpx.put(base + "/workspaces/acme/operations/deep", content=body, headers=headers)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error == {"code": "bad_request", "message": "the body: the document is nested more than 64 levels deep"}
    assert registry.operations("acme") == {}
