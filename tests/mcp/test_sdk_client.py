"""The official MCP Python SDK client decides: both its auto (2026-07-28) and legacy modes."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from mcp import Client
from tests.mcp.apps import make_endpoint

pytestmark = pytest.mark.anyio

MODES = ["auto", "legacy"]


@pytest.mark.parametrize("mode", MODES)
async def test_client_negotiates_the_expected_era(serve: Callable[..., str], mode: str) -> None:
    url = serve(make_endpoint())
    async with Client(url, mode=mode) as client:
        expected = "2026-07-28" if mode == "auto" else "2025-11-25"
        assert client.protocol_version == expected
        assert client.server_capabilities.tools is not None


@pytest.mark.parametrize("mode", MODES)
async def test_client_lists_every_tool_across_pages(serve: Callable[..., str], mode: str) -> None:
    url = serve(make_endpoint(extra=25, page_size=7))
    async with Client(url, mode=mode, cache=None) as client:
        names: list[str] = []
        cursor: str | None = None
        pages = 0
        while True:
            page = await client.list_tools(cursor=cursor)
            names += [tool.name for tool in page.tools]
            pages += 1
            cursor = page.next_cursor
            if cursor is None:
                break
    assert pages == 5
    assert names[:5] == ["echo", "rows", "fail", "crash", "image"]
    assert names[5:] == [f"t{i:04d}" for i in range(25)]


@pytest.mark.parametrize("mode", MODES)
async def test_client_reads_tool_definitions(serve: Callable[..., str], mode: str) -> None:
    url = serve(make_endpoint())
    async with Client(url, mode=mode) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    echo = tools["echo"]
    assert echo.title == "Echo"
    assert echo.description == "Repeat the text."
    assert echo.input_schema["required"] == ["text"]
    assert echo.annotations is not None and echo.annotations.read_only_hint is True
    assert tools["rows"].annotations is None  # no hint set: annotations left out
    assert tools["rows"].title == "rows"  # no title anywhere: the name


@pytest.mark.parametrize("mode", MODES)
async def test_client_calls_a_tool_and_gets_structured_content(serve: Callable[..., str], mode: str) -> None:
    url = serve(make_endpoint())
    async with Client(url, mode=mode) as client:
        result = await client.call_tool("rows", {"count": 2})
    assert result.is_error is False
    assert result.structured_content == {"result": [{"id": 0, "name": "n0"}, {"id": 1, "name": "n1"}]}
    assert result.content[0].text == '[{"id":0,"name":"n0"},{"id":1,"name":"n1"}]'


@pytest.mark.parametrize("mode", MODES)
async def test_client_sees_invalid_arguments_as_a_tool_error(serve: Callable[..., str], mode: str) -> None:
    url = serve(make_endpoint())
    async with Client(url, mode=mode) as client:
        result = await client.call_tool("echo", {"times": "x", "extra": 1})
    assert result.is_error is True
    assert result.structured_content is None
    text = result.content[0].text
    assert '"error_code":"invalid_arguments"' in text
    for path in ("$.text", "$.times", "$.extra"):
        assert f'"path":"{path}"' in text


@pytest.mark.parametrize("mode", MODES)
async def test_client_gets_an_error_for_an_unknown_tool(serve: Callable[..., str], mode: str) -> None:
    from mcp.shared.exceptions import MCPError

    url = serve(make_endpoint())
    async with Client(url, mode=mode) as client:
        with pytest.raises(MCPError) as caught:
            await client.call_tool("nope", {})
    assert caught.value.error.code == -32602
    assert "nope" in caught.value.error.message


@pytest.mark.parametrize("mode", MODES)
async def test_client_receives_tool_chosen_content_blocks(serve: Callable[..., str], mode: str) -> None:
    url = serve(make_endpoint())
    async with Client(url, mode=mode) as client:
        result = await client.call_tool("image", {})
    assert result.content[0].type == "image"
    assert result.content[0].mime_type == "image/png"


@pytest.mark.filterwarnings("ignore:ping is removed")
async def test_legacy_client_can_ping(serve: Callable[..., str]) -> None:
    url = serve(make_endpoint())
    async with Client(url, mode="legacy") as client:
        result = await client.send_ping()
    assert result.model_dump(exclude_none=True) == {}
