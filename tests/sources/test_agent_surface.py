"""A gateway agent's resources and prompts: documents, GET operations read through their pipeline, stored prompt
templates in a sandbox, completions from enums, through the official SDK client in both eras."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from mcp.shared.exceptions import MCPError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from crank.admin.actions import check_runtime
from crank.exceptions import ConfigurationError, RegistryError
from crank.registry import Registry
from crank.server import GatewayService
from mcp import Client, types
from tests.mcp.wire import modern_headers, modern_request

pytestmark = pytest.mark.anyio
MODES = ["auto", "legacy"]
GUIDE = "# Records\n\nRead a record with `get_record` before you change it."
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\nfake").decode()
BY_ID = {
    "type": "object",
    "properties": {"id": {"type": "integer"}, "view": {"type": "string", "enum": ["full", "brief"]}},
    "required": ["id"],
}


class Records:
    """The upstream: records by id, counting reads; id 404 is missing."""

    def __init__(self) -> None:
        self.reads: list[dict[str, Any]] = []
        self.app = Starlette(routes=[Route("/records/{id}", self.get), Route("/status", self.status)])

    async def get(self, request: Request) -> Response:
        self.reads.append({"id": request.path_params["id"], **request.query_params})
        if request.path_params["id"] == "404":
            return JSONResponse({"message": "no such record"}, status_code=404)
        return JSONResponse(
            {"id": int(request.path_params["id"]), "name": "Ada", "view": request.query_params.get("view")}
        )

    async def status(self, request: Request) -> Response:
        return JSONResponse({"up": True})


def publish(registry: Registry, base: str, **agent: Any) -> None:
    registry.create_workspace("acme", "Acme")
    registry.put_operation("acme", "get_record", {
        "protocol": "http", "target": {"method": "GET", "url": base + "/records/{id}"},
        "description": "Reads one record.", "input_schema": BY_ID,
    })  # fmt: skip
    registry.put_operation("acme", "status", {
        "protocol": "http", "target": {"method": "GET", "url": base + "/status"}, "description": "Is it up?",
    })  # fmt: skip
    spec = {
        "bindings": [
            {"operation": "get_record", "resource": True, "title": "Record",
             "translations": {"fr": {"title": "Fiche", "description": "Lit une fiche."}}},
            {"operation": "status", "resource": {"uri_template": "records://status", "mime_type": "application/json"}},
        ],
        "documents": [
            {"uri": "docs://acme/guide", "name": "guide", "title": "Guide", "text": GUIDE,
             "translations": {"fr": {"title": "Mode d'emploi"}}},
            {"uri": "docs://acme/logo", "name": "logo", "mime_type": "image/png", "blob": PNG},
        ],
        "prompts": [
            {"name": "summarize", "description": "Summarize a record.",
             "arguments": [{"name": "id", "required": True}, {"name": "tone", "enum": ["formal", "casual"]}],
             "messages": [
                 {"text": "Summarize record {{ id }}{% if tone %} in a {{ tone }} tone{% endif %}."},
                 {"resource": "docs://acme/{{ 'guide' }}", "role": "assistant"},
                 {"image": {"data": PNG, "mime_type": "image/png"}},
             ]},
        ],
        **agent,
    }  # fmt: skip
    registry.put_agent("acme", "desk", spec)
    registry.publish("acme", "desk", check=check_runtime)


@pytest.fixture
def records() -> Records:
    return Records()


@pytest.fixture
def gateway(registry: Registry, serve: Callable[..., str], records: Records) -> str:
    publish(registry, serve(records.app))
    return serve(GatewayService(registry, require_api_keys=False)) + "/mcp/v1/acme/desk"


@pytest.mark.parametrize("mode", MODES)
async def test_documents_are_listed_and_read(gateway: str, mode: str) -> None:
    async with Client(gateway, mode=mode) as client:
        listed = {item.name: item for item in (await client.list_resources()).resources}
        guide = await client.read_resource("docs://acme/guide")
        logo = await client.read_resource("docs://acme/logo")
    assert listed["guide"].title == "Guide" and listed["guide"].mime_type == "text/markdown"
    assert listed["guide"].size == len(GUIDE)
    assert guide.contents[0].text == GUIDE  # type: ignore[union-attr]
    assert logo.contents[0].blob == PNG and logo.contents[0].mime_type == "image/png"  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", MODES)
async def test_a_get_operation_is_read_through_its_pipeline(gateway: str, records: Records, mode: str) -> None:
    async with Client(gateway, mode=mode) as client:
        templates = (await client.list_resource_templates()).resource_templates
        read = await client.read_resource("crank://acme/desk/get_record/7")
        fixed = await client.read_resource("records://status")
    assert [(item.name, item.uri_template, item.title) for item in templates] == [
        ("get_record", "crank://acme/desk/get_record/{id}", "Record")
    ]
    content = read.contents[0]
    assert content.uri == "crank://acme/desk/get_record/7" and content.mime_type == "application/json"
    assert json.loads(content.text) == {"id": 7, "name": "Ada", "view": None}  # type: ignore[union-attr]
    assert json.loads(fixed.contents[0].text) == {"up": True}  # type: ignore[union-attr]
    assert records.reads == [{"id": "7"}]  # the id went to the path as the integer its schema says


async def test_a_variable_the_tool_refuses_is_invalid_params_with_its_violations(
    gateway: str, records: Records
) -> None:
    async with Client(gateway) as client:
        with pytest.raises(MCPError) as refused:
            await client.read_resource("crank://acme/desk/get_record/seven")
        with pytest.raises(MCPError) as missing:
            await client.read_resource("crank://acme/desk/get_record/404")
    assert refused.value.error.code == -32602
    assert refused.value.error.data["error_code"] == "invalid_arguments"  # type: ignore[index]
    assert missing.value.error.code == -32603
    assert missing.value.error.data["error_code"].startswith("upstream")  # type: ignore[index]
    assert records.reads == [{"id": "404"}]  # the refused one never left


async def test_reads_are_limited_like_calls(registry: Registry, serve: Callable[..., str], records: Records) -> None:
    publish(registry, serve(records.app), limits={"rate": {"calls": 1, "window": 60}})
    url = serve(GatewayService(registry, require_api_keys=False)) + "/mcp/v1/acme/desk"
    async with Client(url) as client:
        await client.read_resource("crank://acme/desk/get_record/1")
        with pytest.raises(MCPError) as limited:
            await client.read_resource("crank://acme/desk/get_record/2")
    assert limited.value.error.data["error_code"] == "rate_limited"  # type: ignore[index]
    assert len(records.reads) == 1


@pytest.mark.parametrize("mode", MODES)
async def test_a_stored_prompt_renders_text_an_embedded_document_and_an_image(gateway: str, mode: str) -> None:
    async with Client(gateway, mode=mode) as client:
        listed = (await client.list_prompts()).prompts
        got = await client.get_prompt("summarize", {"id": "7", "tone": "formal"})
    assert listed[0].name == "summarize" and [argument.name for argument in listed[0].arguments or []] == ["id", "tone"]
    text, embedded, image = (message.content for message in got.messages)
    assert text.text == "Summarize record 7 in a formal tone."  # type: ignore[union-attr]
    assert got.messages[1].role == "assistant"
    assert embedded.resource.uri == "docs://acme/guide" and embedded.resource.text == GUIDE  # type: ignore[union-attr]
    assert image.data == PNG and image.mime_type == "image/png"  # type: ignore[union-attr]


async def test_prompt_arguments_outside_their_enum_or_missing_are_refused(gateway: str) -> None:
    async with Client(gateway) as client:
        with pytest.raises(MCPError) as outside:
            await client.get_prompt("summarize", {"id": "7", "tone": "angry"})
        with pytest.raises(MCPError) as missing:
            await client.get_prompt("summarize", {"tone": "formal"})
    assert outside.value.error.code == missing.value.error.code == -32602
    assert "listed values" in outside.value.error.message and "'id'" in missing.value.error.message


@pytest.mark.parametrize("mode", MODES)
async def test_completions_come_from_enums(gateway: str, mode: str) -> None:
    async with Client(gateway, mode=mode) as client:
        tone = await client.complete(types.PromptReference(name="summarize"), {"name": "tone", "value": "f"})
        view = await client.complete(
            types.ResourceTemplateReference(uri="crank://acme/desk/get_record/{id}"), {"name": "id", "value": ""}
        )
    assert tone.completion.values == ["formal"]
    assert view.completion.values == []  # `id` has no enum


async def test_texts_follow_the_translation_chain(gateway: str) -> None:
    async with httpx.AsyncClient() as http:

        def ask(method: str) -> Any:
            headers = {**modern_headers(method), "Accept-Language": "fr"}
            return http.post(gateway, json=modern_request(method), headers=headers)

        resources = {item["name"]: item for item in (await ask("resources/list")).json()["result"]["resources"]}
        templates = (await ask("resources/templates/list")).json()["result"]["resourceTemplates"]
    assert resources["guide"]["title"] == "Mode d'emploi" and templates[0]["title"] == "Fiche"
    assert templates[0]["description"] == "Lit une fiche."


@pytest.mark.parametrize(
    ("template", "problem"),
    [
        ("{% for i in range(10**9) %}x{% endfor %}", "For is not allowed"),
        ("{{ id.__class__.__mro__ }}", "Getattr is not allowed"),
        ("{{ id * 100000000 }}", "Mul is not allowed"),
        ("{{ self }}", "'self' is not an argument"),
        ("{{ id|replace('a', id) }}", "the filter 'replace' is not allowed"),
        ("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", "Macro is not allowed"),
        ("{% include 'x' %}", "Include is not allowed"),
        ("{{ id", "does not parse"),
        ("{{ id|tojson|tojson }}", "the filter 'tojson' is not allowed"),  # each tojson doubles the quotes
        ("{{ " + " ~ ".join(["id"] * 17) + " }}", "uses arguments 17 times"),
        ("{{ (id|e ~ 'x')|urlencode }}", "at most one per value"),
        ("{% if id %}" * 40 + "x" + "{% endif %}" * 40, "nested"),
        ("{{ " + "not " * 3000 + "id }}", "nested"),
        ("{{ id is empty }}", "the test 'empty' is not allowed"),
    ],
)
def test_a_hostile_prompt_template_fails_the_publish(registry: Registry, template: str, problem: str) -> None:
    registry.create_workspace("acme", "Acme")
    prompt = {"name": "evil", "arguments": [{"name": "id"}], "messages": [{"text": template}]}
    registry.put_agent("acme", "desk", {"prompts": [prompt]})
    with pytest.raises(ConfigurationError, match=r"agent acme/desk, prompt 'evil', messages\[0\].*" + problem):
        registry.publish("acme", "desk", check=check_runtime)


async def test_a_rendered_prompt_is_bounded(registry: Registry, serve: Callable[..., str]) -> None:
    registry.create_workspace("acme", "Acme")
    # One budget for the whole prompt: each message is within it, all three together are not.
    prompt = {"name": "echo", "arguments": [{"name": "text"}], "messages": [{"text": "{{ text }}" * 8}] * 3}
    registry.put_agent("acme", "desk", {"prompts": [prompt]})
    registry.publish("acme", "desk", check=check_runtime)
    url = serve(GatewayService(registry, require_api_keys=False)) + "/mcp/v1/acme/desk"
    async with Client(url) as client:
        fine = await client.get_prompt("echo", {"text": "x" * 1000})
        with pytest.raises(MCPError) as refused:
            await client.get_prompt("echo", {"text": "x" * 60_000})  # 3 × 8 × 60,000 > 1 MiB > 8 × 60,000
    assert fine.messages[0].content.text == "x" * 8000  # type: ignore[union-attr]
    assert refused.value.error.code == -32602 and "longer than 1048576 characters" in refused.value.error.message


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"documents": [{"uri": "docs://a", "name": "get_record", "text": "x"}]}, "name is taken"),
        # discovery mode's own tools take their names (and texts) whatever the agent's mode: a mode can change
        ({"prompts": [{"name": "call_operation", "messages": [{"text": "x"}]}]}, "name is taken"),
        ({"documents": [{"uri": "docs://a", "name": "search_operations", "text": "x"}]}, "name is taken"),
        ({"documents": [{"uri": "not a uri", "name": "guide", "text": "x"}]}, "uri"),
        ({"documents": [{"uri": "docs://a", "name": "guide", "text": "x", "blob": "eA=="}]}, "either text or blob"),
        ({"documents": [{"uri": "docs://a", "name": "guide", "text": "x" * 300_000}]}, "text"),
        (
            {"prompts": [{"name": "p", "messages": [{"text": "a", "image": {"data": "", "mime_type": "image/png"}}]}]},
            "exactly one of",
        ),
        (
            {"prompts": [{"name": "p", "messages": [{"image": {"data": "not base64!", "mime_type": "image/png"}}]}]},
            "image data is not valid base64",
        ),
        (  # each document is within its own bound; together they are over the agent's
            {"documents": [{"uri": f"docs://{n}", "name": f"d{n}", "text": "x" * 250_000} for n in range(17)]},
            "hold 4250000 characters together, more than the 4194304 allowed",
        ),
    ],
)
def test_wrong_documents_and_prompts_fail_the_publish(registry: Registry, change: dict[str, Any], problem: str) -> None:
    registry.create_workspace("acme", "Acme")
    registry.put_operation("acme", "get_record", {"protocol": "http", "target": {"url": "http://127.0.0.1:9/r/{id}"},
                                                  "input_schema": BY_ID})  # fmt: skip
    registry.put_agent("acme", "desk", {"bindings": [{"operation": "get_record"}], **change})
    with pytest.raises((RegistryError, ConfigurationError), match=problem):
        registry.publish("acme", "desk", check=check_runtime)


@pytest.mark.parametrize(
    ("operation", "resource", "problem"),
    [
        ({"target": {"method": "DELETE", "url": "http://127.0.0.1:9/r/{id}"}}, True, "only a GET operation"),
        ({"target": {"url": "http://127.0.0.1:9/r"}}, True, r"required arguments \['id'\] are not variables"),
        ({"target": {"url": "http://127.0.0.1:9/r/{id}"}}, {"uri_template": "x://{nope}"}, "not arguments"),
    ],
)
def test_only_a_get_whose_required_arguments_are_in_its_uri_is_a_resource(
    registry: Registry, operation: dict[str, Any], resource: Any, problem: str
) -> None:
    registry.create_workspace("acme", "Acme")
    registry.put_operation("acme", "op", {"protocol": "http", "input_schema": BY_ID, **operation})
    registry.put_agent("acme", "desk", {"bindings": [{"operation": "op", "resource": resource}]})
    with pytest.raises((RegistryError, ConfigurationError), match=problem):
        registry.publish("acme", "desk", check=check_runtime)


async def test_a_discovery_agent_reads_its_operations_as_resources_too(
    registry: Registry, serve: Callable[..., str], records: Records
) -> None:
    publish(registry, serve(records.app), mode="discovery")
    url = serve(GatewayService(registry, require_api_keys=False)) + "/mcp/v1/acme/desk"
    async with Client(url) as client:
        tools = [tool.name for tool in (await client.list_tools()).tools]
        read = await client.read_resource("crank://acme/desk/get_record/3")
        prompts = [prompt.name for prompt in (await client.list_prompts()).prompts]
    assert "get_record" not in tools and "call_operation" in tools  # the operation is unlisted, still readable
    assert json.loads(read.contents[0].text)["id"] == 3  # type: ignore[union-attr]
    assert prompts == ["summarize"] and records.reads == [{"id": "3"}]
