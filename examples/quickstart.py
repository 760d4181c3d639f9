"""A small MCP endpoint built with Crank's own API: `crank serve examples.quickstart:app`.

MCP clients connect to http://127.0.0.1:8000/mcp; the plain pair is at /mcp/tools and /mcp/call.
"""

from __future__ import annotations

from typing import Any

from starlette.applications import Starlette

from crank.exceptions import ToolError
from crank.mcp import CallContext, Catalog, EndpointOptions, MCPEndpoint, Tool, ToolAnnotations, Translations, mount

BOOKS = [
    {"id": 1, "title": "Kobzar", "author": "Taras Shevchenko", "year": 1840},
    {"id": 2, "title": "The Forest Song", "author": "Lesya Ukrainka", "year": 1911},
    {"id": 3, "title": "Tiger Trappers", "author": "Ivan Bahrianyi", "year": 1944},
]


async def search_books(arguments: dict[str, Any], context: CallContext) -> list[dict[str, Any]]:
    query = arguments["query"].lower()
    found = [book for book in BOOKS if query in book["title"].lower() or query in book["author"].lower()]
    return found[: arguments.get("limit", 10)]


async def get_book(arguments: dict[str, Any], context: CallContext) -> dict[str, Any]:
    for book in BOOKS:
        if book["id"] == arguments["id"]:
            return book
    raise ToolError(
        f"No book with id {arguments['id']}",
        error_code="not_found",
        recoverable=True,
        suggested_action="Call books.search to find a valid id.",
    )


BOOK_SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "title": {"type": "string"},
        "author": {"type": "string"},
        "year": {"type": "integer"},
    },
    "required": ["id", "title", "author", "year"],
}

tools = [
    Tool(
        name="books.search",
        title="Search books",
        description="Find books whose title or author contains the query. Returns at most `limit` books.",
        input_schema={
            "type": "object",
            "properties": {
                "query": {"type": "string", "minLength": 1, "description": "Part of a title or an author's name"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
        output_schema={
            "type": "object",
            "properties": {"result": {"type": "array", "items": BOOK_SCHEMA}},
            "required": ["result"],
        },
        wrap_result=True,
        annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False),
        format="markdown",
        invoker=search_books,
    ),
    Tool(
        name="books.get",
        title="Get a book",
        description="One book by its id.",
        input_schema={
            "type": "object",
            "properties": {"id": {"type": "integer", "description": "The book's id"}},
            "required": ["id"],
            "additionalProperties": False,
        },
        output_schema=BOOK_SCHEMA,
        annotations=ToolAnnotations(read_only_hint=True),
        invoker=get_book,
    ),
]

translations = Translations(
    {
        "uk": {
            "books.search": {"title": "Пошук книжок", "description": "Знайти книжки за назвою або автором."},
            "books.get": {"title": "Книжка за id"},
        }
    },
    default_language="en",
)

endpoint = MCPEndpoint(
    Catalog(tools, translations=translations), EndpointOptions(instructions="A tiny library catalog.")
)
app = Starlette(routes=[mount("/mcp", endpoint)])
