"""A small REST API that the gateway tests call over real HTTP on loopback."""

from __future__ import annotations

from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

USERS = [{"id": i, "name": f"user{i}", "email": f"u{i}@example.com", "internal": "x"} for i in range(1, 8)]
seen: list[dict[str, Any]] = []


async def list_users(request: Request) -> Response:
    seen.append({"path": request.url.path, "query": dict(request.query_params), "headers": dict(request.headers)})
    limit = int(request.query_params.get("limit", "100"))
    return JSONResponse({"items": USERS[:limit], "total": len(USERS)})


async def get_user(request: Request) -> Response:
    seen.append({"path": request.url.path, "raw_path": request.scope["raw_path"].decode()})
    for user in USERS:
        if str(user["id"]) == request.path_params["id"]:
            return JSONResponse(user)
    return JSONResponse({"message": f"user {request.path_params['id']} does not exist"}, status_code=404)


async def create_user(request: Request) -> Response:
    body = await request.json()
    seen.append({"body": body, "headers": dict(request.headers)})
    return JSONResponse({"id": 99, **body}, status_code=201)


async def broken(request: Request) -> Response:
    return PlainTextResponse("Traceback (most recent call last): secret stuff", status_code=500)


async def limited(request: Request) -> Response:
    return JSONResponse({"error": "slow down"}, status_code=429, headers={"Retry-After": "7"})


async def blob(request: Request) -> Response:
    """A large answer: `{"data": "xx..."}` of `size` bytes of data."""
    return Response(b'{"data":"' + b"x" * int(request.path_params["size"]) + b'"}', media_type="application/json")


async def not_json(request: Request) -> Response:
    return PlainTextResponse("<html>oops</html>")


app = Starlette(
    routes=[
        Route("/users", list_users, methods=["GET"]),
        Route("/users", create_user, methods=["POST"]),
        Route("/users/{id}", get_user),
        Route("/broken", broken),
        Route("/limited", limited),
        Route("/html", not_json),
        Route("/blob/{size:int}", blob),
    ]
)
