"""The catalog linter and budget report: each rule fires on a bad tool and stays quiet on a good one."""

from __future__ import annotations

from typing import Any

import pytest

import crank.admin.lint
from crank.admin.apply import apply_catalog, load_catalog_file
from crank.admin.lint import DEFAULT_BUDGET, RULES, CatalogReport, Finding, catalog_report, lint_runtime
from crank.demo import CATALOG
from crank.exceptions import ConfigurationError
from crank.gateway.client import UpstreamClient
from crank.mcp.catalog import estimate_tokens
from crank.registry import Registry, RuntimeView, load_runtime
from crank.sources.agents import build_catalog
from crank.types import JSONObject

UNUSED_CLIENT = UpstreamClient()  # building a catalog needs a client; nothing is sent

GOOD_DESCRIPTION = (
    "Gets a customer by email. Use it when you need the customer id before opening a ticket. "
    "Returns the id, name and status."
)


def good_tool(**changes: Any) -> JSONObject:
    """A tool every rule accepts; tests change one thing at a time."""
    tool: JSONObject = {
        "tool_name": "get_customer_by_email",
        "tool_description": GOOD_DESCRIPTION,
        "title": "Customer by email",
        "protocol": "http",
        "target": {"method": "GET", "url": "https://api.shop.test/customers"},
        "input_schema": {
            "type": "object",
            "properties": {
                "email": {"type": "string", "format": "email", "description": "The customer's email."},
                "include_orders": {"type": "boolean", "description": "Also return the open orders."},
            },
            "required": ["email"],
            "additionalProperties": False,
        },
        "output_schema": {
            "type": "object",
            "properties": {"customer_id": {"type": "string"}, "status": {"type": "string"}},
        },
        "input_mapping": None,
        "output_mapping": None,
        "execution_config": None,
        "annotations": {"readOnlyHint": True},
        "translations": None,
    }
    tool.update(changes)
    return tool


def with_inputs(properties: JSONObject, **changes: Any) -> JSONObject:
    return good_tool(input_schema={"type": "object", "properties": properties}, **changes)


def runtime(*tools: JSONObject, **agent: Any) -> RuntimeView:
    """A view written in the flat form (format 1), read by the loader as the registry reads a stored one."""
    return load_runtime({
        "workspace": {"id": "w1", "slug": "acme", "default_language": "en"},
        "agent": {"id": "a1", "slug": "support", "description": "Answer customers' questions about orders.", **agent},
        "tools": list(tools) or [good_tool()],
    })  # fmt: skip


def rules(tool: JSONObject) -> set[str]:
    return {finding.rule for finding in lint_runtime(runtime(tool))}


def findings_of(rule: str, tool: JSONObject) -> list[Finding]:
    return [finding for finding in lint_runtime(runtime(tool)) if finding.rule == rule]


def test_a_good_tool_has_no_findings() -> None:
    assert lint_runtime(runtime(good_tool())) == []


def test_every_finding_has_its_rules_severity_and_names_its_tool() -> None:
    bad = good_tool(tool_name="call_api", tool_description="Works with customers.")
    findings = lint_runtime(runtime(bad, description=None))
    assert {finding.rule for finding in findings} >= {"generic-name", "vague-description", "agent-description"}
    assert all(finding.severity == RULES[finding.rule] for finding in findings)
    assert all(finding.tool == "call_api" for finding in findings if finding.rule != "agent-description")


def test_every_rule_is_documented_in_the_module_docstring() -> None:
    assert all(f"`{rule}` ({severity})" in str(crank.admin.lint.__doc__) for rule, severity in RULES.items())


def test_a_finding_reads_as_one_line() -> None:
    finding = Finding("get_user", "generic-name", "error", "'call_api' says nothing.", "name it get_customer.")
    assert str(finding) == "error  get_user  generic-name: 'call_api' says nothing. Fix: name it get_customer."
    assert str(Finding(None, "over-budget", "error", "Big.", "split it.")).startswith("error  (agent)  over-budget")


# -- names -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["call_api", "execute_request", "run", "do", "request", "api", "get_data", "sendRequest", "manage_users",
     "handle_webhook", "process_payment"],
)  # fmt: skip
def test_generic_names_are_errors(name: str) -> None:
    (finding,) = findings_of("generic-name", good_tool(tool_name=name))
    assert finding.severity == "error" and finding.tool == name and repr(name) in finding.message
    assert "verb_object" in finding.fix


@pytest.mark.parametrize("name", ["get_customer_by_email", "createSupportTicket", "order_book", "catalog_search"])
def test_specific_names_pass(name: str) -> None:
    assert not rules(good_tool(tool_name=name)) & {"generic-name", "name-shape", "name-verb"}


@pytest.mark.parametrize("name", ["bestseller", "customers"])
def test_a_one_word_name_has_no_verb_object_shape(name: str) -> None:
    assert rules(good_tool(tool_name=name)) == {"name-shape"}


def test_a_name_without_a_verb_is_a_warning() -> None:
    assert rules(good_tool(tool_name="customer_profile")) == {"name-verb"}
    assert rules(good_tool(tool_name="get_customer_profile")) == set()


# -- descriptions ------------------------------------------------------------------------------------


@pytest.mark.parametrize("description", [None, "", "   "])
def test_a_missing_description_is_an_error(description: str | None) -> None:
    assert rules(good_tool(tool_description=description)) == {"missing-description"}


@pytest.mark.parametrize(
    "description",
    [
        "Works with customers. Use it when the user asks about a customer.",
        "Processes data. Use it when needed.",
        "Performs an API request. Use it to look up customers.",
        "Calls the API. Use it when the user asks.",
        "Работает с клиентами. Используйте, когда нужно найти клиента.",
        "Обрабатывает данные. Используйте, когда нужно.",
        "Выполняет запрос к API. Используйте, когда нужно.",
        "GET /customers",
        "Get customer by email.",
        "Gets customers by emails",
    ],
)
def test_vague_descriptions_are_errors(description: str) -> None:
    (finding,) = findings_of("vague-description", good_tool(tool_description=description))
    assert finding.severity == "error" and "Use it when" in finding.fix


def test_a_description_restating_the_name_is_vague() -> None:
    tool = good_tool(tool_name="search_customers", tool_description="Searches customers.")
    assert rules(tool) == {"vague-description", "missing-when"}
    tool = good_tool(tool_name="search_customers", tool_description="Searches customers by name. Use it to find one.")
    assert rules(tool) == set()


def test_the_seeds_own_good_description_passes() -> None:
    description = (
        "Получает карточку клиента по email. Используйте, когда нужно найти клиента перед созданием обращения "
        "или проверкой статуса заказа. Возвращает идентификатор клиента, имя, email и текущий статус."
    )
    assert rules(good_tool(tool_description=description)) == set()


def test_a_short_description_is_a_warning() -> None:
    assert rules(good_tool(tool_description="Finds a customer.")) == {"short-description", "missing-when"}
    assert rules(good_tool(tool_description="Finds a customer. Use it to start.")) == set()


def test_a_description_that_never_says_when_to_call_is_a_warning() -> None:
    description = "Gets a customer by email and returns the id, the name and the status."
    (finding,) = findings_of("missing-when", good_tool(tool_description=description))
    assert finding.severity == "warning"


@pytest.mark.parametrize(
    "cue",
    ["Use it when the order is late.", "Use when the order is late.", "Use to check an order.",
     "Call it when the order is late.", "Use it only before refunds.", "Needed when the user asks for a refund.",
     "Используйте перед возвратом.", "Нужен, если пользователь просит возврат."],
)  # fmt: skip
def test_when_cues_in_english_and_russian_are_recognised(cue: str) -> None:
    assert "missing-when" not in rules(good_tool(tool_description="Gets the status of an order. " + cue))


# -- input parameters --------------------------------------------------------------------------------


def test_parameters_without_a_description_are_named_by_path() -> None:
    properties = {
        "email": {"type": "string"},
        "address": {"type": "object", "description": "Where.", "properties": {"city": {"type": "string"}}},
        "lines": {"type": "array", "description": "Lines.", "items": {"$ref": "#/$defs/Line"}},
        "customer": {"$ref": "#/$defs/Customer"},
    }
    defs = {
        "Line": {"type": "object", "properties": {"sku": {"type": "string"}}},
        "Customer": {"type": "object", "description": "The customer.", "properties": {}},
    }
    tool = good_tool(input_schema={"type": "object", "properties": properties, "$defs": defs})
    (finding,) = findings_of("param-description", tool)
    assert finding.severity == "warning"
    assert finding.message == "parameters without a description: email, address.city, lines[].sku."


def test_a_recursive_schema_is_walked_to_a_limit() -> None:
    node = {"type": "object", "description": "A node.", "properties": {"child": {"$ref": "#/$defs/Node"}}}
    tool = good_tool(input_schema={"type": "object", "properties": {"root": {"$ref": "#/$defs/Node"}},
                                   "$defs": {"Node": node}})  # fmt: skip
    assert rules(tool) == set()


def test_a_reference_cycle_ends() -> None:
    loop = {"A": {"$ref": "#/$defs/B"}, "B": {"$ref": "#/$defs/A"}}
    tool = good_tool(input_schema={"type": "object", "properties": {"loop": {"$ref": "#/$defs/A", "description": "L."}},
                                   "$defs": loop})  # fmt: skip
    assert rules(tool) == set()


@pytest.mark.parametrize(
    ("name", "schema", "reason"),
    [
        ("data", {"type": "object", "description": "The data."}, "is an object without properties"),
        ("payload", {"type": "string"}, "is JSON in a string"),
        (
            "order",
            {"type": "string", "description": "The order.", "contentMediaType": "application/json"},
            "is JSON in a string",
        ),
        ("filter", {"type": "string", "description": "A JSON filter."}, "is JSON in a string"),
        ("anything", {"description": "Whatever the API takes."}, "accepts any value"),
        ("tags", {"type": "array", "description": "Tags."}, "is a list of anything"),
    ],
)
def test_untyped_parameters_are_warnings(name: str, schema: JSONObject, reason: str) -> None:
    (finding,) = findings_of("untyped-parameter", with_inputs({name: schema}))
    assert finding.severity == "warning" and finding.message == f"parameter {name!r} {reason}."


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "description": "Labels.", "additionalProperties": {"type": "string"}},
        {"type": "object", "description": "A person.", "properties": {"name": {"type": "string", "description": "N"}}},
        {"type": "string", "description": "Free text for the agent."},
        {"type": "array", "description": "Tags.", "items": {"type": "string"}},
        {"type": ["string", "null"], "description": "Free text, or null."},
    ],
)
def test_typed_parameters_pass(schema: JSONObject) -> None:
    assert rules(with_inputs({"notes": schema})) == set()


@pytest.mark.parametrize("name", ["body", "data", "payload"])
def test_a_described_text_parameter_named_like_a_blob_is_not_json(name: str) -> None:
    # GitHub's "create an issue": `body` is the Markdown text.
    schema = {"type": "string", "description": "The contents of the issue, in Markdown."}
    assert rules(with_inputs({name: schema})) == set()


@pytest.mark.parametrize(
    "description",
    ["Sort order: 'asc' or 'desc'.", "One of: open, closed.", "asc | desc", "Status (`open`, `closed`).",
     "Possible values: open, closed.", "Возможные значения: open, closed.", "Одно из: «open», «closed»."],
)  # fmt: skip
def test_options_listed_in_a_description_want_an_enum(description: str) -> None:
    (finding,) = findings_of("missing-enum", with_inputs({"sort": {"type": "string", "description": description}}))
    assert finding.severity == "warning" and "'sort'" in finding.message


def test_an_enum_or_plain_prose_needs_no_enum() -> None:
    enum = {"type": "string", "enum": ["asc", "desc"], "description": "Sort order: 'asc' or 'desc'."}
    assert rules(with_inputs({"sort": enum})) == set()
    prose = {"type": "string", "description": "One of the customer's emails, or their phone number."}
    assert rules(with_inputs({"contact": prose})) == set()


# -- multi-action --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "schema"),
    [
        ("action", {"type": "string", "enum": ["create", "update", "delete"], "description": "What to do."}),
        ("operation", {"type": "string", "description": "The operation."}),
        ("command", {"description": "A command."}),
        ("bulk_action", {"type": "string", "description": "Applied to every line."}),
        ("mode", {"type": "string", "description": "The action to perform."}),
        ("type", {"type": "string", "description": "Тип операции."}),
        ("what", {"type": "string", "enum": ["create_ticket", "close_ticket"], "description": "Which step."}),
        ("step", {"enum": ["get", "delete"], "description": "Which step."}),
    ],
)
def test_a_parameter_choosing_the_action_is_an_error(name: str, schema: JSONObject) -> None:
    (finding,) = findings_of("multi-action", with_inputs({name: schema}))
    assert finding.severity == "error" and repr(name) in finding.message and "split" in finding.fix


@pytest.mark.parametrize(
    ("name", "schema"),
    [
        ("type", {"type": "string", "enum": ["person", "company"], "description": "The kind of customer."}),
        ("mode", {"type": "string", "enum": ["fast", "exact"], "description": "Search precision."}),
        ("view", {"type": "string", "enum": ["list", "grid"], "description": "Layout of the answer."}),
        ("status", {"type": "string", "enum": ["open", "close"], "description": "Tickets in this state."}),
        ("action", {"type": "boolean", "description": "Whether an action is pending."}),
    ],
)
def test_a_parameter_that_only_filters_is_not_multi_action(name: str, schema: JSONObject) -> None:
    assert rules(with_inputs({name: schema})) == set()


# -- side effects ------------------------------------------------------------------------------------


def writing_tool(method: str, **changes: Any) -> JSONObject:
    target = {"method": method, "url": "https://api.shop.test/orders"}
    return good_tool(
        **{"tool_name": "create_order", "target": target, "annotations": {"readOnlyHint": False}, **changes}
    )


@pytest.mark.parametrize("method", ["POST", "PATCH", "post"])
def test_a_write_without_an_idempotency_key_is_a_warning(method: str) -> None:
    (finding,) = findings_of("missing-idempotency-key", writing_tool(method))
    assert finding.severity == "warning" and "Idempotency-Key" in finding.fix


@pytest.mark.parametrize(
    "tool",
    [
        writing_tool("POST", execution_config={"idempotency": {"argument": "request_id", "header": "Idempotency-Key"}}),
        writing_tool("POST", annotations={"idempotentHint": True}),
        writing_tool("POST", execution_config={"idempotent": True}),
        writing_tool("POST", annotations={"readOnlyHint": True}),  # a search sent as POST
        writing_tool("PUT"),
        good_tool(protocol="jsonrpc", target={"url": "https://rpc.shop.test", "method": "Orders.create"}),
    ],
)
def test_idempotent_or_keyed_writes_pass(tool: JSONObject) -> None:
    assert "missing-idempotency-key" not in rules(tool)


@pytest.mark.parametrize(
    "tool",
    [
        writing_tool("DELETE", execution_config={"confirmation": False}),
        writing_tool("PUT", execution_config={"confirmation": False}, annotations={"destructiveHint": True}),
    ],
)
def test_switching_off_the_confirmation_of_a_destructive_tool_is_an_error(tool: JSONObject) -> None:
    (finding,) = findings_of("confirmation-off", tool)
    assert finding.severity == "error"


@pytest.mark.parametrize(
    "tool",
    [
        writing_tool("DELETE"),
        writing_tool("DELETE", execution_config={"confirmation": True}),
        good_tool(execution_config={"confirmation": False}),
    ],
)
def test_a_confirmed_or_harmless_tool_passes(tool: JSONObject) -> None:
    assert "confirmation-off" not in rules(tool)


# -- output ------------------------------------------------------------------------------------------

BOOK_LIST: JSONObject = {"type": "array", "items": {"type": "object", "properties": {"id": {"type": "integer"}}}}
PAGE: JSONObject = {"type": "object", "properties": {"items": {"$ref": "#/$defs/Books"}, "total": {"type": "integer"}},
                    "$defs": {"Books": BOOK_LIST}}  # fmt: skip


@pytest.mark.parametrize(
    ("schema", "mapping", "lists"),
    [
        (BOOK_LIST, None, "a list"),
        (PAGE, None, "lists (items)"),
        (PAGE, {"max_items": 20}, "lists (items)"),  # max_items alone cannot cap a list inside an object
    ],
)
def test_an_uncapped_list_in_the_output_is_a_warning(
    schema: JSONObject, mapping: JSONObject | None, lists: str
) -> None:
    (finding,) = findings_of("uncapped-array", good_tool(output_schema=schema, output_mapping=mapping))
    assert finding.severity == "warning" and finding.message == f"returns {lists} of any length."


@pytest.mark.parametrize(
    ("schema", "mapping"),
    [(BOOK_LIST, {"max_items": 20}), (PAGE, {"select": "items", "max_items": 20})],
)
def test_a_capped_list_passes(schema: JSONObject, mapping: JSONObject) -> None:
    assert rules(good_tool(output_schema=schema, output_mapping=mapping)) == set()


@pytest.mark.parametrize("schema", [None, {}, {"type": "object"}])
def test_an_undescribed_unselected_output_is_a_warning(schema: JSONObject | None) -> None:
    (finding,) = findings_of("raw-output", good_tool(output_schema=schema))
    assert finding.severity == "warning"


@pytest.mark.parametrize(
    ("schema", "mapping"),
    [(None, {"select": "{id: id, status: status}"}), ({"type": "string"}, None),
     ({"type": "object", "additionalProperties": {"type": "integer"}}, None)],
)  # fmt: skip
def test_a_selected_or_described_output_passes(schema: JSONObject | None, mapping: JSONObject | None) -> None:
    assert rules(good_tool(output_schema=schema, output_mapping=mapping)) == set()


# -- the agent ---------------------------------------------------------------------------------------


def test_two_tools_on_one_endpoint_are_a_warning_on_the_second() -> None:
    twin = good_tool(tool_name="find_customer_by_email")
    findings = lint_runtime(runtime(good_tool(), twin))
    assert [(finding.tool, finding.rule) for finding in findings] == [("find_customer_by_email", "duplicate-target")]
    assert "'get_customer_by_email'" in findings[0].message


def test_one_endpoint_bound_as_distinct_tasks_passes() -> None:
    active = good_tool(tool_name="get_active_customer", input_mapping=[{"value": "active", "to": "query.status"}])
    assert lint_runtime(runtime(good_tool(), active)) == []


def test_findings_come_tool_by_tool_then_the_agent() -> None:
    first, second = good_tool(tool_name="customers"), good_tool(tool_name="get_customer", tool_description=None)
    findings = lint_runtime(runtime(first, second, description=""))
    assert [(finding.tool, finding.rule) for finding in findings] == [
        ("customers", "name-shape"),
        ("get_customer", "missing-description"),
        ("get_customer", "duplicate-target"),
        (None, "agent-description"),
    ]


def test_an_agent_without_a_description_is_a_warning() -> None:
    (finding,) = lint_runtime(runtime(description=None))
    assert (finding.tool, finding.rule, finding.severity) == (None, "agent-description", "warning")


def test_an_agent_over_budget_is_an_error_naming_the_heaviest_tools() -> None:
    history = {"method": "GET", "url": "https://api.shop.test/history"}
    heavy = good_tool(tool_name="get_customer_history", tool_description=GOOD_DESCRIPTION * 5, target=history)
    view = runtime(good_tool(), heavy)
    estimate = catalog_report(view).estimate
    (finding,) = lint_runtime(view, budget=estimate - 1)
    assert (finding.tool, finding.rule, finding.severity) == (None, "over-budget", "warning")  # seed 004
    assert f"about {estimate} tokens, over the budget of {estimate - 1}" in finding.message
    assert "heaviest: get_customer_history (" in finding.message
    assert lint_runtime(view, budget=estimate) == []


def test_the_agents_own_budget_applies_unless_one_is_given() -> None:
    estimate = catalog_report(runtime()).estimate
    assert [finding.rule for finding in lint_runtime(runtime(token_budget=estimate - 1))] == ["over-budget"]
    assert lint_runtime(runtime(token_budget=estimate - 1), budget=estimate) == []


def test_a_catalog_that_cannot_be_built_is_a_compile_error() -> None:
    (finding,) = lint_runtime(runtime(good_tool(target={"url": "ftp://api.shop.test/customers"})))
    assert (finding.tool, finding.rule, finding.severity) == (None, "compile-error", "error")
    assert "'get_customer_by_email'" in finding.message and "ftp" in finding.message


def test_a_tool_the_runtime_view_cannot_hold_names_its_field() -> None:
    with pytest.raises(ConfigurationError, match="tool 'get_customer_by_email': protocol: Input should be 'http'"):
        runtime(good_tool(protocol="soap"))


# -- the budget report -------------------------------------------------------------------------------


def test_the_report_measures_the_published_tools_list() -> None:
    heavy = good_tool(tool_name="get_customer_history", tool_description=GOOD_DESCRIPTION * 3)
    view = runtime(good_tool(), heavy)
    catalog = build_catalog(view, UNUSED_CLIENT)
    report = catalog_report(view)
    assert report == CatalogReport(
        agent="support",
        estimate=catalog.token_estimate,
        budget=DEFAULT_BUDGET,
        tools=[(entry["name"], estimate_tokens([entry])) for entry in reversed(catalog.tool_entries("en"))],
    )
    assert report.tools[0][0] == "get_customer_history" and not report.over_budget


def test_the_report_takes_the_given_budget_then_the_agents() -> None:
    assert catalog_report(runtime(token_budget=100)).budget == 100
    assert catalog_report(runtime(token_budget=100), budget=50).budget == 50
    assert catalog_report(runtime(token_budget=1)).over_budget


# -- the shipped demo --------------------------------------------------------------------------------


def test_the_demo_catalog_is_clean(registry: Registry) -> None:
    catalog = load_catalog_file(CATALOG, variables={"CRANK_DEMO_API": "http://shop.test/api"})
    apply_catalog(registry, catalog, base_dir=CATALOG.parent)
    view = registry.draft_runtime("demo", "bookshop")
    assert [str(finding) for finding in lint_runtime(view)] == []
    assert not catalog_report(view).over_budget


def test_a_malformed_draft_is_a_finding_not_a_crash() -> None:
    view = runtime(good_tool(input_schema={"type": "object", "properties": ["not", "a", "mapping"]}))
    findings = lint_runtime(view)
    assert "compile-error" in {finding.rule for finding in findings}


def test_a_destructive_put_without_a_word_on_confirmation_is_flagged() -> None:
    put = {**good_tool(), "target": {"method": "PUT", "url": "http://u/x"}, "annotations": {"destructiveHint": True}}
    assert "unconfirmed-destructive" in rules(put)
    assert "unconfirmed-destructive" not in rules({**put, "execution_config": {"confirmation": True}})
    assert "unconfirmed-destructive" not in rules({**put, "annotations": {"destructiveHint": False}})
