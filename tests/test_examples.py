"""The examples run: the quick start answers both eras through the official client."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from examples.quickstart import app

from mcp import Client

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_quickstart_serves_books(serve: Callable[..., str], mode: str) -> None:
    url = serve(app) + "/mcp"
    async with Client(url, mode=mode) as client:
        names = [tool.name for tool in (await client.list_tools()).tools]
        found = await client.call_tool("books.search", {"query": "forest"})
        missing = await client.call_tool("books.get", {"id": 99})
    assert names == ["books.search", "books.get"]
    assert found.structured_content == {
        "result": [{"id": 2, "title": "The Forest Song", "author": "Lesya Ukrainka", "year": 1911}]
    }
    assert found.content[0].text.startswith("| id | title | author | year |")
    assert missing.is_error and '"error_code":"not_found"' in missing.content[0].text


async def test_quickstart_plain_pair_in_ukrainian(serve: Callable[..., str]) -> None:
    url = serve(app) + "/mcp"
    async with httpx.AsyncClient() as client:
        response = await client.get(url + "/tools", headers={"Accept-Language": "uk"})
    titles = [tool["title"] for tool in response.json()["tools"]]
    assert titles == ["Пошук книжок", "Книжка за id"]
