"""The surface's edges: every wire field a definition can carry, bad params for each new method, what readers and
renderers may return, questions asked where the era cannot carry them, and the session id's checks."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import httpx
import pytest

from crank.exceptions import ConfigurationError
from crank.mcp import (
    CallContext,
    Catalog,
    EndpointOptions,
    Icon,
    InputRequired,
    MCPEndpoint,
    Prompt,
    PromptArgument,
    PromptMessage,
    PromptResult,
    Resource,
    ResourceContents,
    ResourceTemplate,
    Tool,
    elicitation,
)
from crank.mcp.sessions import SessionIds
from tests.mcp.wire import headers_for, legacy_headers, legacy_request, modern_headers, modern_request

pytestmark = pytest.mark.anyio
ICON = Icon("https://example.org/i.png", mime_type="image/png")


async def two_parts(context: CallContext) -> list[ResourceContents]:
    return [ResourceContents("a://two", text="one"), ResourceContents("a://two", blob=b"\x00\x01", mime_type="x/y")]


async def wrong_kind(context: CallContext) -> int:
    return 42


async def asks_reader(context: CallContext) -> str:
    answer = await context.elicit("Which part?", {"type": "object", "properties": {"part": {"type": "string"}}})
    return f"part {answer.get('content', {}).get('part')}"


async def page(uri: str, variables: Mapping[str, str], context: CallContext) -> ResourceContents:
    return ResourceContents(uri, text=variables["slug"], mime_type="text/plain")


async def described(arguments: Mapping[str, str], context: CallContext) -> PromptResult:
    return PromptResult([PromptMessage.text("hi"), {"role": "assistant", "content": {"type": "text", "text": "yo"}}],
                        description="A greeting")  # fmt: skip


async def nothing_useful(arguments: Mapping[str, str], context: CallContext) -> int:
    return 7


async def asks_prompt(arguments: Mapping[str, str], context: CallContext) -> Any:
    return InputRequired({"q": elicitation("Context?", {"c": {"type": "string"}}, ["c"])})


async def echo(arguments: dict[str, Any], context: CallContext) -> Any:
    return arguments


def catalog() -> Catalog:
    return Catalog(
        [Tool(name="echo", invoker=echo, input_schema={"type": "object"})],
        resources=[
            Resource("a://two", "two", two_parts, title="Two", description="Two parts", mime_type="x/y", size=5,
                     icons=(ICON,), meta={"k": "v"}),
            Resource("a://wrong", "wrong", wrong_kind),
            Resource("a://asks", "asks", asks_reader),
        ],
        resource_templates=[ResourceTemplate("a://pages/{slug}", "page", page, title="Page", icons=(ICON,),
                                             meta={"k": "v"})],
        prompts=[
            Prompt("described", described, title="Described", icons=(ICON,), meta={"k": "v"},
                   arguments=(PromptArgument("who", "Whom", title="Who", completions=["ann"]),)),
            Prompt("useless", nothing_useful),
            Prompt("asks", asks_prompt),
        ],
    )  # fmt: skip


@pytest.fixture
def url(serve: Callable[..., str]) -> str:
    return serve(MCPEndpoint(catalog(), EndpointOptions(instructions="Read the guide first."))) + "/"


async def rpc(url: str, method: str, params: Any = None, *, modern: bool = False) -> Any:
    body = modern_request(method, params) if modern else legacy_request(method, params)
    async with httpx.AsyncClient() as client:
        return (await client.post(url, json=body, headers=headers_for(body) if modern else legacy_headers())).json()


async def test_every_field_a_definition_has_reaches_its_list_entry(url: str) -> None:
    (resource, *_) = (await rpc(url, "resources/list"))["result"]["resources"]
    assert resource == {"uri": "a://two", "name": "two", "title": "Two", "description": "Two parts",
                        "mimeType": "x/y", "icons": [{"src": ICON.src, "mimeType": "image/png"}], "_meta": {"k": "v"},
                        "size": 5}  # fmt: skip
    (template,) = (await rpc(url, "resources/templates/list"))["result"]["resourceTemplates"]
    assert template["title"] == "Page" and template["icons"] and template["_meta"] == {"k": "v"}
    prompt = (await rpc(url, "prompts/list"))["result"]["prompts"][0]
    assert prompt["title"] == "Described" and prompt["icons"] and prompt["_meta"] == {"k": "v"}
    assert prompt["arguments"] == [{"name": "who", "title": "Who", "description": "Whom", "required": False}]


async def test_readers_and_renderers_answer_in_every_shape_they_may(url: str) -> None:
    contents = (await rpc(url, "resources/read", {"uri": "a://two"}))["result"]["contents"]
    assert contents == [{"uri": "a://two", "text": "one"}, {"uri": "a://two", "mimeType": "x/y", "blob": "AAE="}]
    page_read = (await rpc(url, "resources/read", {"uri": "a://pages/intro"}))["result"]["contents"]
    assert page_read == [{"uri": "a://pages/intro", "mimeType": "text/plain", "text": "intro"}]
    rendered = (await rpc(url, "prompts/get", {"name": "described"}))["result"]
    assert rendered["description"] == "A greeting" and [m["role"] for m in rendered["messages"]] == [
        "user",
        "assistant",
    ]


@pytest.mark.parametrize(("method", "params"), [("resources/read", {"uri": "a://wrong"}),
                                                ("prompts/get", {"name": "useless"})])  # fmt: skip
async def test_a_reader_or_renderer_that_returns_nonsense_is_an_internal_error(
    url: str, method: str, params: Any
) -> None:
    error = (await rpc(url, method, params))["error"]
    assert error["code"] == -32603 and set(error["data"]) == {"request_id"}  # no exception text


async def test_questions_from_readers_and_prompts_follow_each_era(url: str) -> None:
    legacy = (await rpc(url, "prompts/get", {"name": "asks"}))["error"]
    assert legacy["code"] == -32603 and "cannot carry" in legacy["message"]
    modern_prompt = await rpc(url, "prompts/get", {"name": "asks"}, modern=True)
    assert modern_prompt["error"]["code"] == -32021  # the client did not declare elicitation
    body = modern_request("resources/read", {"uri": "a://asks"})
    body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] = {"elicitation": {}}
    async with httpx.AsyncClient() as client:
        first = (await client.post(url, json=body, headers=headers_for(body))).json()["result"]
        assert first["resultType"] == "input_required"
        (key,) = first["inputRequests"]
        body["params"].update(inputResponses={key: {"action": "accept", "content": {"part": "b"}}},
                              requestState=first["requestState"])  # fmt: skip
        second = (await client.post(url, json=body, headers=headers_for(body))).json()["result"]
    assert second["contents"][0]["text"] == "part b"
    json_only = {**legacy_headers(), "Accept": "application/json"}  # a 2025-11-25 client that takes no stream
    async with httpx.AsyncClient() as client:
        body = legacy_request("resources/read", {"uri": "a://asks"})
        error = (await client.post(url, json=body, headers=json_only)).json()["error"]
    assert error["code"] == -32603 and error["data"]["error_code"] == "client_request_unavailable"


@pytest.mark.parametrize(
    ("method", "params", "fragment"),
    [
        ("initialize", {}, "protocolVersion must be a string"),
        ("tools/list", {"cursor": 5}, "cursor must be a string"),
        ("resources/list", {"cursor": "bogus"}, "invalid cursor"),
        ("resources/read", {"uri": 5}, "uri must be a string"),
        ("prompts/get", {"name": 5}, "name must be a string"),
        ("completion/complete", {"ref": "x", "argument": {}}, "must be objects"),
        ("completion/complete", {"ref": {"type": "ref/prompt"}, "argument": {"name": 1}}, "must be strings"),
        ("completion/complete", {"ref": {"type": "ref/resource", "uri": "a://nope/{x}"}, "argument": {"name": "x"}},
         "Unknown resource template"),
    ],
)  # fmt: skip
async def test_bad_params_are_refused_by_name(url: str, method: str, params: Any, fragment: str) -> None:
    error = (await rpc(url, method, params))["error"]
    assert error["code"] == -32602 and fragment in error["message"]


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [({"inputResponses": []}, "inputResponses must be an object"), ({"requestState": 5}, "requestState")],
)
async def test_a_2026_request_with_malformed_answers_is_refused(url: str, extra: dict[str, Any], fragment: str) -> None:
    body = modern_request("tools/call", {"name": "echo", "arguments": {}, **extra})
    async with httpx.AsyncClient() as client:
        error = (await client.post(url, json=body, headers=modern_headers("tools/call", "echo"))).json()["error"]
    assert fragment in error["message"]


async def test_instructions_reach_both_eras(url: str) -> None:
    init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    assert (await rpc(url, "initialize", init))["result"]["instructions"] == "Read the guide first."
    assert (await rpc(url, "server/discover", modern=True))["result"]["instructions"] == "Read the guide first."


def test_a_session_id_is_checked_before_it_is_believed() -> None:
    sessions = SessionIds(b"k" * 32)
    issued = sessions.issue({"elicitation": {}, "sampling": {}, "experimental": {}})
    assert sessions.capabilities(issued) == {"elicitation", "sampling"}
    token, said, signature = issued.split(".")
    forged = f"{token}.elicitation+sampling+roots.{signature}"
    assert sessions.verified(forged) is None and sessions.capabilities(forged) == frozenset()
    assert sessions.verified("x" * 500) is None and sessions.verified(None) is None
    assert SessionIds(b"other" * 8).verified(issued) is None  # another deployment's secret


def test_a_reader_returning_an_unknown_kind_is_refused_plainly() -> None:
    from crank.mcp.prompts import messages_wire
    from crank.mcp.resources import contents_wire

    with pytest.raises(TypeError, match="expected str, bytes or ResourceContents"):
        contents_wire("a://x", 1, None)
    with pytest.raises(TypeError, match="expected str, messages or PromptResult"):
        messages_wire(1)
    with pytest.raises(ConfigurationError, match="simple"):
        ResourceTemplate("{x}", "t", page).compile()


async def refused_question(arguments: dict[str, Any], context: CallContext) -> Any:
    try:
        await context.elicit("Sure?", {"type": "object"})
    except Exception as failed:  # noqa: BLE001 - the test reads the structured error the tool would send
        return {"refused": getattr(failed, "error_code", type(failed).__name__)}
    return {"refused": None}


async def chatty(arguments: dict[str, Any], context: CallContext) -> Any:
    await context.log("debug", "below the level")  # info by default: not sent
    await context.log("warning", {"disk": "low"}, logger="store")
    return {"logged": True}


async def test_log_messages_carry_their_logger_and_respect_the_default_level(serve: Callable[..., str]) -> None:
    url = serve(MCPEndpoint(Catalog([Tool(name="chatty", invoker=chatty)], logging=True))) + "/"
    async with httpx.AsyncClient() as client:
        response = await client.post(
            url, json=legacy_request("tools/call", {"name": "chatty"}), headers=legacy_headers()
        )
    messages = [line[6:] for line in response.text.splitlines() if line.startswith("data: {")]
    assert len(messages) == 2  # the warning, then the answer
    assert '"logger":"store"' in messages[0] and '"level":"warning"' in messages[0]


async def test_a_client_whose_session_lacks_the_capability_is_never_asked(serve: Callable[..., str]) -> None:
    """2025-11-25: the signed session id says what the client declared at initialize; a question it did not
    declare is refused at once (the specification forbids sending it)."""
    catalog = Catalog([Tool(name="asks", invoker=refused_question)], asks=True)
    url = serve(MCPEndpoint(catalog)) + "/"
    init = {
        "protocolVersion": "2025-11-25",
        "capabilities": {"sampling": {}},
        "clientInfo": {"name": "t", "version": "1"},
    }
    async with httpx.AsyncClient() as client:
        session = (await client.post(url, json=legacy_request("initialize", init), headers=legacy_headers())).headers[
            "mcp-session-id"
        ]
        headers = {**legacy_headers(), "Mcp-Session-Id": session}
        answer = await client.post(url, json=legacy_request("tools/call", {"name": "asks"}), headers=headers)
    assert answer.json()["result"]["structuredContent"] == {"refused": "client_request_unavailable"}


def test_the_log_level_map_forgets_the_least_recent_session_first() -> None:
    from crank.mcp.sessions import LogLevels

    levels = LogLevels(capacity=2)
    for session, rank in (("a", 0), ("b", 5), ("c", 7)):
        levels.set(session, rank)
    assert (levels.rank("a"), levels.rank("b"), levels.rank("c")) == (1, 5, 7)  # "a" forgotten: the default


async def test_a_relayed_answer_that_is_not_json_is_dropped() -> None:
    from crank.mcp.streams import ServerRequests

    requests = ServerRequests()
    request_id, future = await requests.open()
    requests._deliver(b"{not json")
    requests._deliver(b'{"message": "not an object"}')
    assert not future.done()
    requests._deliver(b'{"message": {"id": "%s", "result": {}}, "owner": ""}' % request_id.encode())
    assert future.done()


def test_duplicate_surface_definitions_fail_when_the_catalog_is_built() -> None:
    template = ResourceTemplate("a://p/{x}", "p", page)
    prompt = Prompt("p", described)
    with pytest.raises(ConfigurationError, match="offered twice"):
        Catalog([], resource_templates=[template, template])
    with pytest.raises(ConfigurationError, match="more than one prompt"):
        Catalog([], prompts=[prompt, prompt])


def test_a_resource_is_answered_by_a_reader_or_a_tool_of_the_catalog() -> None:
    from crank.mcp import Catalog, Resource, ResourceTemplate, Tool

    async def answer(arguments: Any, context: Any) -> Any:
        return arguments

    async def read(context: Any) -> str:
        return "text"

    tool = Tool(name="get", description="d", input_schema={"type": "object"}, invoker=answer)
    with pytest.raises(ConfigurationError, match="give a reader or a tool, not both or neither"):
        Catalog([tool], resources=[Resource("x://a", "a")])
    with pytest.raises(ConfigurationError, match="give a reader or a tool, not both or neither"):
        Catalog([tool], resources=[Resource("x://a", "a", read, tool="get")])
    with pytest.raises(ConfigurationError, match="no tool 'missing' answers it"):
        Catalog([tool], resource_templates=[ResourceTemplate("x://{id}", "t", tool="missing")])
    assert Catalog([tool], resource_templates=[ResourceTemplate("x://{id}", "t", tool="get")]).features >= {"resources"}


@pytest.mark.anyio
async def test_a_tool_backed_template_types_its_variables_by_the_tools_schema() -> None:
    from crank.mcp import Catalog, ResourceTemplate, Tool
    from crank.mcp.resources import typed_variables, variable_kinds

    schema = {"type": "object", "properties": {"n": {"type": "integer"}, "x": {"type": "number"},
              "b": {"type": "boolean"}, "s": {"type": ["string", "integer"]}, "u": {}}}  # fmt: skip
    kinds = variable_kinds(["n", "x", "b", "s", "u"], schema)
    assert set(kinds) == {"n", "x", "b"}
    given = {"n": "-12", "x": "2.5e3", "b": "true", "s": "7", "u": "9"}
    assert typed_variables(given, kinds) == {"n": -12, "x": 2500.0, "b": True, "s": "7", "u": "9"}
    assert typed_variables({"n": "1e400", "x": "nan", "b": "yes"}, kinds) == {"n": "1e400", "x": "nan", "b": "yes"}
    tool = Tool(name="get", description="d", input_schema=schema, invoker=lambda a, c: a)  # type: ignore[arg-type,return-value]
    catalog = Catalog([tool], resource_templates=[ResourceTemplate("x://{n}/{b}", "t", tool="get")])
    found = catalog.match("x://5/false")
    assert found is not None and found[0].kinds == {"n": kinds["n"], "b": kinds["b"]}


async def test_a_tool_that_answers_its_own_blocks_is_read_block_by_block(serve: Callable[..., str]) -> None:
    from crank.mcp import ResourceTemplate, Tool, ToolResult

    async def blocks(arguments: dict[str, Any], context: CallContext) -> ToolResult:
        if arguments["id"] == "bad":
            return ToolResult([{"type": "text", "text": "no such card"}], is_error=True)
        return ToolResult([{"type": "text", "text": "card 7"},
                           {"type": "image", "data": "AAE=", "mimeType": "image/png"},
                           {"type": "resource", "resource": {"uri": "c://7/back", "text": "back"}},
                           {"type": "resource_link", "uri": "c://8", "name": "next"}])  # fmt: skip

    tool = Tool(name="card", description="d", input_schema={"type": "object", "properties": {"id": {"type": "string"}}},
                invoker=blocks)  # fmt: skip
    templates = [ResourceTemplate("c://{id}", "card", tool="card", mime_type="text/plain")]
    url = serve(MCPEndpoint(Catalog([tool], resource_templates=templates))) + "/"
    contents = (await rpc(url, "resources/read", {"uri": "c://7"}))["result"]["contents"]
    assert contents == [{"uri": "c://7", "mimeType": "text/plain", "text": "card 7"},
                        {"uri": "c://7", "mimeType": "image/png", "blob": "AAE="},
                        {"uri": "c://7/back", "text": "back"}]  # fmt: skip
    error = (await rpc(url, "resources/read", {"uri": "c://bad"}))["error"]
    assert error["code"] == -32603 and error["message"] == "no such card"
