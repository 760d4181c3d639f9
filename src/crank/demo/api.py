"""The demo REST API that `crank demo` (and `make run`) puts behind the gateway: a small bookshop.

In memory, reset at every start. Its OpenAPI document is `openapi.yaml` beside this file; the demo
catalog (`catalog.yaml`) imports it, so the demo shows the whole path: OpenAPI -> operations ->
agent -> MCP tools.
"""

from __future__ import annotations

import itertools
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

__all__ = ["BOOKS", "create_app"]

BOOKS: list[dict[str, Any]] = [
    {"id": 1, "title": "Kobzar", "author": "Taras Shevchenko", "year": 1840, "price": 12.5, "stock": 4},
    {"id": 2, "title": "The Forest Song", "author": "Lesya Ukrainka", "year": 1911, "price": 9.0, "stock": 7},
    {"id": 3, "title": "Shadows of Forgotten Ancestors", "author": "Mykhailo Kotsiubynsky", "year": 1911,
     "price": 8.0, "stock": 0},
    {"id": 4, "title": "Intermezzo", "author": "Mykhailo Kotsiubynsky", "year": 1908, "price": 6.5, "stock": 3},
    {"id": 5, "title": "The Cathedral", "author": "Oles Honchar", "year": 1968, "price": 11.0, "stock": 2},
]  # fmt: skip


def _problem(status: int, message: str) -> JSONResponse:
    return JSONResponse({"message": message}, status_code=status)


def create_app() -> Starlette:
    """A fresh bookshop (its own order book)."""
    orders: dict[int, dict[str, Any]] = {}
    order_ids = itertools.count(1001)

    async def search_books(request: Request) -> Response:
        query = request.query_params.get("query", "").lower()
        limit = int(request.query_params.get("limit", "10"))
        found = [b for b in BOOKS if query in b["title"].lower() or query in b["author"].lower()]
        return JSONResponse({"items": found[:limit], "total": len(found)})

    async def get_book(request: Request) -> Response:
        book = next((b for b in BOOKS if b["id"] == request.path_params["book_id"]), None)
        return JSONResponse(book) if book else _problem(404, f"book {request.path_params['book_id']} does not exist")

    async def create_order(request: Request) -> Response:
        body = await request.json()
        book = next((b for b in BOOKS if b["id"] == body.get("book_id")), None)
        if book is None:
            return _problem(404, f"book {body.get('book_id')} does not exist")
        quantity = int(body.get("quantity", 1))
        if quantity > book["stock"]:
            return _problem(409, f"only {book['stock']} copies of book {book['id']} are in stock")
        order = {"id": next(order_ids), "book_id": book["id"], "quantity": quantity, "status": "placed",
                 "total": round(book["price"] * quantity, 2)}  # fmt: skip
        orders[order["id"]] = order
        return JSONResponse(order, status_code=201)

    async def get_order(request: Request) -> Response:
        order = orders.get(request.path_params["order_id"])
        return JSONResponse(order) if order else _problem(404, f"order {request.path_params['order_id']} not found")

    async def cancel_order(request: Request) -> Response:
        order = orders.get(request.path_params["order_id"])
        if order is None:
            return _problem(404, f"order {request.path_params['order_id']} not found")
        order["status"] = "cancelled"
        return JSONResponse(order)

    return Starlette(
        routes=[
            Route("/books", search_books, methods=["GET"]),
            Route("/books/{book_id:int}", get_book, methods=["GET"]),
            Route("/orders", create_order, methods=["POST"]),
            Route("/orders/{order_id:int}", get_order, methods=["GET"]),
            Route("/orders/{order_id:int}", cancel_order, methods=["DELETE"]),
        ]
    )
