"""`crank apply`: a declarative catalog file, checked whole, applied in one transaction, published when changed."""

from __future__ import annotations

from pathlib import Path

import pytest

from crank.admin.apply import apply_catalog, load_catalog_file
from crank.demo import CATALOG
from crank.exceptions import ApplyError, RegistryError
from crank.registry import Registry

VARIABLES = {"CRANK_DEMO_API": "http://shop.test/api"}


def test_the_shipped_example_applies_and_publishes(registry: Registry) -> None:
    report = apply_catalog(registry, load_catalog_file(CATALOG, variables=VARIABLES), base_dir=CATALOG.parent)
    assert report.workspace == "demo" and report.versions == {"bookshop": (1, True)}
    operations = registry.operations("demo")
    assert set(operations) == {
        "get_bestseller",
        "cancel_order",
        "create_order",
        "get_book",
        "get_order",
        "search_books",
    }
    assert operations["get_book"]["target"] == {"method": "GET", "url": "http://shop.test/api/books/{book_id}"}
    assert operations["get_bestseller"]["target"]["url"] == "http://shop.test/api/books/1"
    (published,) = registry.published()
    tools = {tool.tool_name: tool for tool in published.runtime.tools}
    assert list(tools) == ["search_books", "get_book", "get_bestseller", "order_book", "get_order", "cancel_order"]
    assert tools["cancel_order"].annotations.destructive_hint is True  # derived from DELETE at import
    assert tools["search_books"].translations["uk"]["title"] == "Пошук книжок"


def test_applying_again_publishes_only_what_changed(registry: Registry, tmp_path: Path) -> None:
    text = CATALOG.read_text()
    file = tmp_path / "catalog.yaml"
    (tmp_path / "openapi.yaml").write_text((CATALOG.parent / "openapi.yaml").read_text())
    file.write_text(text)
    assert apply_catalog(registry, load_catalog_file(file, variables=VARIABLES), base_dir=tmp_path).versions == {
        "bookshop": (1, True)
    }
    assert apply_catalog(registry, load_catalog_file(file, variables=VARIABLES), base_dir=tmp_path).versions == {
        "bookshop": (1, False)
    }
    file.write_text(text.replace("title: Order a book", "title: Buy a book"))
    assert apply_catalog(registry, load_catalog_file(file, variables=VARIABLES), base_dir=tmp_path).versions == {
        "bookshop": (2, True)
    }
    assert registry.versions("demo", "bookshop") == [1, 2]


def test_a_mistake_anywhere_applies_nothing(registry: Registry, tmp_path: Path) -> None:
    file = tmp_path / "catalog.yaml"
    file.write_text(
        "workspace: {slug: acme, name: Acme}\n"
        "operations:\n  ok: {protocol: http, target: {url: 'http://u/x'}}\n"
        "agents:\n  desk: {bindings: [{operation: ok}]}\n  broken: {bindings: [{operation: missing}]}\n"
    )
    with pytest.raises(RegistryError, match="agent acme/broken, binding 0: no operation 'missing'"):
        apply_catalog(registry, load_catalog_file(file))
    assert registry.workspaces() == [] and registry.published() == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("workspace: [unclosed\n", r"line \d+ not valid YAML"),
        ("workspace: {slug: Bad Slug, name: x}\n", r"workspace.slug: String should match pattern"),
        ("workspace: {slug: a, name: x}\nagents: {desk: {bindings: [{tool_name: t}]}}\n",
         r"agents.desk.bindings\[0\].operation: Field required"),
        ("workspace: {slug: a, name: x}\noperations: {o: {protocol: soap, target: {}}}\n",
         r"operations.o.protocol: Input should be 'http' or 'jsonrpc'"),
        ("workspace: {slug: a, name: '${NOT_SET_ANYWHERE}'}\n", r"\$\{NOT_SET_ANYWHERE\} is used but .* not set"),
    ],
)  # fmt: skip
def test_bad_files_name_the_place(tmp_path: Path, text: str, message: str) -> None:
    file = tmp_path / "catalog.yaml"
    file.write_text(text)
    with pytest.raises(ApplyError, match=message):
        load_catalog_file(file)


def test_an_invalid_source_names_it_and_writes_nothing(registry: Registry, tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("openapi: 3.0.3\ninfo: {title: x, version: '1'}\npaths: {/x: {get: {}}}\n")
    file = tmp_path / "catalog.yaml"
    file.write_text("workspace: {slug: acme, name: Acme}\nsources: [{openapi: bad.yaml, base_url: 'http://u'}]\n")
    with pytest.raises(ApplyError, match=r"sources\[0\]: .*responses"):
        apply_catalog(registry, load_catalog_file(file), base_dir=tmp_path)
    assert registry.workspaces() == []


def test_defaults_and_environment_fill_variables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    file = tmp_path / "catalog.yaml"
    file.write_text("workspace: {slug: acme, name: '${SHOP_NAME}', default_language: '${LANG_X:-uk}'}\n")
    monkeypatch.setenv("SHOP_NAME", "Acme shop")
    catalog = load_catalog_file(file)
    assert (catalog.workspace.name, catalog.workspace.default_language) == ("Acme shop", "uk")


def test_operations_in_the_file_change_imported_ones_field_by_field(registry: Registry) -> None:
    apply_catalog(registry, load_catalog_file(CATALOG, variables=VARIABLES), base_dir=CATALOG.parent)
    search = registry.operation("demo", "search_books")
    assert search["output_mapping"] == {"select": "items", "max_items": 3}  # from the file
    assert search["output_schema"]["type"] == "array"
    assert search["target"]["url"] == "http://shop.test/api/books" and search["source"]["kind"] == "openapi"


def test_an_operation_neither_imported_nor_complete_is_named(registry: Registry, tmp_path: Path) -> None:
    file = tmp_path / "catalog.yaml"
    file.write_text("workspace: {slug: acme, name: Acme}\noperations: {lonely: {description: x}}\n")
    with pytest.raises(ApplyError, match=r"operations.lonely \(not imported by any source.*\n.*protocol"):
        apply_catalog(registry, load_catalog_file(file))
    assert registry.workspaces() == []


def test_a_catalog_file_gives_its_workspace_an_oauth_policy(registry: Registry, tmp_path: Path) -> None:
    (tmp_path / "openapi.yaml").write_text((CATALOG.parent / "openapi.yaml").read_text())
    text = CATALOG.read_text().replace(
        "workspace:\n", "workspace:\n  oauth: {issuers: [https://id.example], agent_scopes: {'*': [books]}}\n", 1
    )
    file = tmp_path / "catalog.yaml"
    file.write_text(text)
    apply_catalog(registry, load_catalog_file(file, variables=VARIABLES), base_dir=tmp_path)
    policy = registry.workspace_oauth_policy("demo")
    assert policy is not None and policy.issuers == ("https://id.example",) and policy.agent_needs("x") == {"books"}
    file.write_text(CATALOG.read_text())  # the file is the truth: without the section, API keys only again
    apply_catalog(registry, load_catalog_file(file, variables=VARIABLES), base_dir=tmp_path)
    assert registry.workspace_oauth_policy("demo") is None


def test_a_catalog_file_gives_its_workspace_credentials_per_scheme(registry: Registry, tmp_path: Path) -> None:
    (tmp_path / "openapi.yaml").write_text((CATALOG.parent / "openapi.yaml").read_text())
    text = CATALOG.read_text().replace(
        "workspace:\n",
        "workspace:\n  credentials: {ApiKey: {secret: 'env:DEMO_KEY', origins: ['https://a.example']}}\n",
        1,
    )
    file = tmp_path / "catalog.yaml"
    file.write_text(text)
    apply_catalog(registry, load_catalog_file(file, variables=VARIABLES), base_dir=tmp_path)
    assert {scheme: given.secret for scheme, given in registry.workspace_credentials("demo").items()} == {
        "ApiKey": "env:DEMO_KEY"
    }
    file.write_text(CATALOG.read_text())  # the file is the truth
    apply_catalog(registry, load_catalog_file(file, variables=VARIABLES), base_dir=tmp_path)
    assert registry.workspace_credentials("demo") == {}


def test_a_files_execution_config_keeps_what_the_document_says_of_the_body(registry: Registry, tmp_path: Path) -> None:
    """An imported form operation whose `execution_config` the file sets (a timeout) still sends a form: what the
    document says of its body (and security) is kept unless the file names it too."""
    from tests import realapis

    file = tmp_path / "catalog.yaml"
    file.write_text(
        "workspace: {slug: forms, name: Forms}\n"
        f"sources: [{{openapi: '{realapis.require(realapis.FORM_DATA)}', base_url: 'http://forms.test'}}]\n"
        "operations:\n  demo_form_data: {execution_config: {timeout: 30}}\n"
    )
    apply_catalog(registry, load_catalog_file(file), base_dir=tmp_path)
    config = registry.operations("forms")["demo_form_data"]["execution_config"]
    assert config == {"timeout": 30, "body": {"content_type": "application/x-www-form-urlencoded"}}
