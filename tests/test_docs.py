"""The Python blocks of README.md and docs/*.md run as written.

A file's blocks run in order in one namespace (a later block may use what an earlier one defined), in an
empty working directory. A block fenced as ```` ```python notest ```` is an outline, not a program, and
is skipped.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from mcp import Client

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(r"^```python([^\n]*)\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def blocks(page: Path) -> list[str]:
    """The page's runnable Python blocks."""
    return [code for info, code in _BLOCK.findall(page.read_text(encoding="utf-8")) if "notest" not in info.split()]


def run(page: Path) -> list[dict[str, Any]]:
    """Run the page's blocks; the namespace after each one."""
    namespace: dict[str, Any] = {"__name__": f"docs_{page.stem}"}
    after = []
    for index, code in enumerate(blocks(page)):
        exec(compile(code, f"{page.name}[python block {index}]", "exec"), namespace)
        after.append(dict(namespace))
    return after


@pytest.mark.parametrize("page", PAGES, ids=[page.relative_to(ROOT).as_posix() for page in PAGES])
def test_python_blocks_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()  # docs/gateway.md keeps its registry in data/
    assert len(run(page)) == len(blocks(page))


@pytest.mark.anyio
async def test_readme_rpc_service_serves_json_rpc_and_mcp(serve: Callable[..., str]) -> None:
    readme = ROOT / "README.md"
    index = next(index for index, code in enumerate(blocks(readme)) if "RPCService(" in code)
    url = serve(run(readme)[index]["app"])
    async with httpx.AsyncClient() as http:
        body = {"jsonrpc": "2.0", "id": 1, "method": "Catalog.search", "params": {"query": "kob"}}
        found = (await http.post(url + "/rpc", json=body)).json()
    async with Client(url + "/mcp") as client:
        result = await client.call_tool("Catalog.search", {"query": "song"})
    assert found["result"] == [{"id": 1, "name": "Kobzar"}]
    assert result.structured_content == {"result": [{"id": 2, "name": "Forest Song"}]}
