"""The surface a catalog offers: capabilities derived from the handler table, resources and templates (hostile URIs
included), prompts with checked arguments, completions, translated texts and the 2026-07-28 caching hints."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import httpx
import pytest

from crank.exceptions import ConfigurationError, ToolError
from crank.mcp import (
    CallContext,
    Catalog,
    EndpointOptions,
    MCPEndpoint,
    Prompt,
    PromptArgument,
    Resource,
    ResourceTemplate,
    Tool,
    Translations,
)
from crank.mcp.completions import MAX_COMPLETION_VALUES
from tests.mcp.wire import headers_for, legacy_headers, legacy_request, modern_headers, modern_request

pytestmark = pytest.mark.anyio
read: list[Mapping[str, str]] = []


async def echo(arguments: dict[str, Any], context: CallContext) -> Any:
    return arguments


async def guide(context: CallContext) -> str:
    return "Read me first."


async def page(uri: str, variables: Mapping[str, str], context: CallContext) -> str:
    read.append(dict(variables))
    return f"page {variables['slug']}"


async def broken(context: CallContext) -> str:
    raise ToolError("The wiki is down", error_code="wiki_down", recoverable=True)


async def greet(arguments: Mapping[str, str], context: CallContext) -> str:
    return f"Greet {arguments['name']} in {arguments.get('style', 'plain')} style."


def tool() -> Tool:
    return Tool(name="echo", invoker=echo, input_schema={"type": "object"})


SLUGS = ["intro", "install"]


def surface(**options: Any) -> Catalog:
    return Catalog(
        [tool()],
        resources=[
            Resource("docs://guide", "guide", guide, title="Guide", mime_type="text/markdown"),
            Resource("docs://broken", "broken", broken),
        ],
        resource_templates=[ResourceTemplate("docs://pages/{slug}", "page", page, completions={"slug": SLUGS})],
        prompts=[
            Prompt("greet", greet, description="Say hello", arguments=(
                PromptArgument("name", required=True, completions=[f"n{i:03}" for i in range(150)]),
                PromptArgument("style", completions=lambda value, known: [f"{known.get('name', '?')}-{value}"]),
            )),
        ],
        **options,
    )  # fmt: skip


async def rpc(url: str, method: str, params: dict[str, Any] | None = None, *, modern: bool = False) -> Any:
    body = modern_request(method, params) if modern else legacy_request(method, params or {})
    headers = headers_for(body) if modern else legacy_headers()
    async with httpx.AsyncClient() as client:
        response = await client.post(url, json=body, headers=headers)
    return response.json()


@pytest.fixture
def url(serve: Callable[..., str]) -> str:
    return serve(MCPEndpoint(surface(), EndpointOptions(ttl_ms=30_000, cache_scope="private"))) + "/"


def test_features_say_what_a_catalog_offers() -> None:
    assert Catalog([tool()]).features == {"tools"}
    assert surface().features == {"tools", "resources", "prompts", "completions"}
    assert surface(logging=True).features == {"tools", "resources", "prompts", "completions", "logging"}


async def test_capabilities_are_derived_from_what_is_registered_and_offered(serve: Callable[..., str]) -> None:
    init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    tools_only = serve(MCPEndpoint(Catalog([tool()]))) + "/"
    assert (await rpc(tools_only, "initialize", init))["result"]["capabilities"] == {"tools": {"listChanged": False}}
    assert (await rpc(tools_only, "resources/list"))["error"]["code"] == -32601
    everything = serve(MCPEndpoint(surface(logging=True))) + "/"
    capabilities = (await rpc(everything, "initialize", init))["result"]["capabilities"]
    assert set(capabilities) == {"tools", "resources", "prompts", "completions", "logging"}
    discovered = (await rpc(everything, "server/discover", modern=True))["result"]["capabilities"]
    assert set(discovered) == {"tools", "resources", "prompts", "completions", "logging"}
    assert (await rpc(everything, "logging/setLevel", {"level": "info"}, modern=True))["error"]["code"] == -32601


async def test_lists_carry_their_entries_and_the_2026_caching_hints(url: str) -> None:
    for method, key in (("resources/list", "resources"), ("resources/templates/list", "resourceTemplates"),
                        ("prompts/list", "prompts")):  # fmt: skip
        legacy = (await rpc(url, method))["result"]
        assert legacy[key] and "ttlMs" not in legacy
        modern = (await rpc(url, method, modern=True))["result"]
        assert modern[key] == legacy[key]
        assert (modern["ttlMs"], modern["cacheScope"], modern["resultType"]) == (30_000, "private", "complete")
    resources = (await rpc(url, "resources/list"))["result"]["resources"]
    assert resources[0] == {"uri": "docs://guide", "name": "guide", "title": "Guide", "mimeType": "text/markdown"}
    read_first = (await rpc(url, "resources/read", {"uri": "docs://guide"}, modern=True))["result"]
    assert read_first["contents"] == [{"uri": "docs://guide", "mimeType": "text/markdown", "text": "Read me first."}]
    assert read_first["ttlMs"] == 30_000


@pytest.mark.parametrize(
    "uri",
    [
        "docs://pages/..", "docs://pages/%2e%2e", "docs://pages/a%2Fb", "docs://pages/a%5Cb", "docs://pages/a%00",
        "docs://pages/a/b", "docs://pages/", "docs://pages/%ff", "docs://pages/" + "a" * 3000, "docs://other",
    ],
)  # fmt: skip
async def test_a_uri_outside_the_templates_is_not_found_and_never_read(url: str, uri: str) -> None:
    read.clear()
    legacy = (await rpc(url, "resources/read", {"uri": uri}))["error"]
    assert legacy["code"] == -32002 and legacy["data"] == {"uri": uri}
    modern = (await rpc(url, "resources/read", {"uri": uri}, modern=True))["error"]
    assert modern["code"] == -32602 and modern["data"] == {"uri": uri}
    assert read == []


async def test_a_template_reads_with_its_decoded_variable(url: str) -> None:
    read.clear()
    answer = (await rpc(url, "resources/read", {"uri": "docs://pages/caf%C3%A9"}))["result"]
    assert answer["contents"][0]["text"] == "page café" and read == [{"slug": "café"}]


async def test_a_readers_tool_error_is_a_json_rpc_error_with_the_structured_error(url: str) -> None:
    error = (await rpc(url, "resources/read", {"uri": "docs://broken"}))["error"]
    assert error["code"] == -32603 and error["data"]["error_code"] == "wiki_down" and error["data"]["request_id"]


@pytest.mark.parametrize(
    ("arguments", "refusal"),
    [
        ({}, "needs the argument(s) 'name'"),
        ({"name": 5}, "must be a string"),
        ({"name": "x" * 70_000}, "at most"),
        ({"name": "Ada", "role": "admin"}, "has no argument 'role'"),
        ("Ada", "must be an object"),
    ],
)
async def test_prompt_arguments_are_checked_before_the_renderer_runs(url: str, arguments: Any, refusal: str) -> None:
    error = (await rpc(url, "prompts/get", {"name": "greet", "arguments": arguments}))["error"]
    assert error["code"] == -32602 and refusal in error["message"]


async def test_a_prompt_renders_its_messages(url: str) -> None:
    result = (await rpc(url, "prompts/get", {"name": "greet", "arguments": {"name": "Ada"}}, modern=True))["result"]
    assert result["messages"] == [{"role": "user", "content": {"type": "text", "text": "Greet Ada in plain style."}}]
    assert (await rpc(url, "prompts/get", {"name": "nope"}))["error"]["code"] == -32602


async def test_completions_filter_cap_and_ask_functions(url: str) -> None:
    def complete(ref: dict[str, Any], argument: str, value: str, **known: str) -> Any:
        params: dict[str, Any] = {"ref": ref, "argument": {"name": argument, "value": value}}
        if known:
            params["context"] = {"arguments": known}
        return rpc(url, "completion/complete", params)

    prompt = {"type": "ref/prompt", "name": "greet"}
    many = (await complete(prompt, "name", "n"))["result"]["completion"]
    assert len(many["values"]) == MAX_COMPLETION_VALUES and many["total"] == 150 and many["hasMore"] is True
    few = (await complete(prompt, "name", "N14"))["result"]["completion"]
    assert few == {"values": [f"n14{i}" for i in range(10)], "total": 10, "hasMore": False}
    function = (await complete(prompt, "style", "fo", name="Ada"))["result"]["completion"]
    assert function["values"] == ["Ada-fo"]
    template = {"type": "ref/resource", "uri": "docs://pages/{slug}"}
    assert (await complete(template, "slug", "in"))["result"]["completion"]["values"] == ["intro", "install"]
    huge = (await complete(prompt, "name", "n" * 5000))["result"]["completion"]
    assert huge["values"] == []
    assert (await complete({"type": "ref/prompt", "name": "nope"}, "x", ""))["error"]["code"] == -32602
    assert (await complete({"type": "ref/tool"}, "x", ""))["error"]["code"] == -32602


def test_titles_and_descriptions_follow_the_translation_chain() -> None:
    texts = Translations({"de": {"greet": {"description": "Sag hallo"}, "guide": {"title": "Anleitung"}}})
    prompts_given = [Prompt("greet", greet, description="Say hello")]
    catalog = Catalog([tool()], translations=texts, prompts=prompts_given,
                      resources=[Resource("docs://guide", "guide", guide, title="Guide")])  # fmt: skip
    prompts, _ = catalog.list_page("prompts", "de", None)
    resources, _ = catalog.list_page("resources", "de", None)
    assert json.loads(prompts)[0]["description"] == "Sag hallo"
    assert json.loads(resources)[0]["title"] == "Anleitung"
    english, _ = catalog.list_page("resources", "en", None)
    assert json.loads(english)[0]["title"] == "Guide"


@pytest.mark.parametrize(
    ("build", "complaint"),
    [
        (lambda: Catalog([], resources=[Resource("no-scheme", "x", guide)]), "is not a URI"),
        (lambda: Catalog([], resources=[Resource("a://x", "x", guide), Resource("a://x", "y", guide)]), "twice"),
        (lambda: Catalog([], resource_templates=[ResourceTemplate("a://{x}/{x}", "t", page)]), "appears twice"),
        (lambda: Catalog([], resource_templates=[ResourceTemplate("a://fixed", "t", page)]), "has no {variable}"),
        (lambda: Catalog([], resource_templates=[ResourceTemplate("a://{x}", "t", page, completions={"y": []})]),
         "unknown"),
        (lambda: Catalog([], prompts=[Prompt("bad name", greet)]), "name must be"),
        (lambda: Catalog([], prompts=[Prompt("p", greet, arguments=(PromptArgument("a"), PromptArgument("a")))]),
         "twice"),
    ],
)  # fmt: skip
def test_a_bad_definition_fails_when_the_catalog_is_built(build: Callable[[], Catalog], complaint: str) -> None:
    with pytest.raises(ConfigurationError, match=complaint):
        build()


def test_a_template_matches_in_one_pass_however_hostile_the_uri() -> None:
    """Each variable stops at the literal after it: a run of separators cannot make the match try every split
    (before, 600 dots against `{a}.{b}.{c}.{d}` took 28 s of backtracking; this URI would take far longer)."""
    catalog = Catalog([], resource_templates=[ResourceTemplate("x://{a}.{b}.{c}.{d}.{e}", "t", page)])
    assert catalog.match_template("x://" + "." * 2000 + "\x01") is None
    assert catalog.match_template("x://" + "a." * 1000) is None
    found = catalog.match_template("x://one.two.three.four.five")
    assert found is not None and found[1] == {"a": "one", "b": "two", "c": "three", "d": "four", "e": "five"}
    with pytest.raises(ConfigurationError, match="literal between them"):
        Catalog([], resource_templates=[ResourceTemplate("x://{a}{b}", "t", page)])


@pytest.mark.parametrize(
    ("method", "params", "named"),
    [("resources/read", {"uri": "docs://guide"}, "uri"), ("prompts/get", {"name": "greet"}, "name")],
)
async def test_mcp_name_must_mirror_the_uri_or_name_at_2026(
    url: str, method: str, params: dict[str, Any], named: str
) -> None:
    async with httpx.AsyncClient() as client:
        wrong = await client.post(url, json=modern_request(method, params), headers=modern_headers(method, "other"))
        missing = await client.post(url, json=modern_request(method, params), headers=modern_headers(method))
    for answer in (wrong, missing):
        assert answer.status_code == 400 and answer.json()["error"]["code"] == -32020
        assert answer.json()["error"]["message"] == f"Mcp-Name header does not match params.{named}"
