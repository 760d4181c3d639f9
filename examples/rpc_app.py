"""A small product catalog and user directory served as JSON-RPC, OpenRPC and MCP by Crank.

    uvicorn examples.rpc_app:app        # or: crank serve examples.rpc_app:app

- JSON-RPC 2.0 at /rpc (v1) and /rpc/v2; GET on either returns its OpenRPC document
- MCP (the `mcp` group) at /mcp (v1) and /mcp/v2; seed 002's plain pair at /mcp/tools and /mcp/call
- titles and descriptions in English and Ukrainian (examples/translations)
- `Authorization: Bearer admin-token` gives the `admin` role, which `user.delete` needs
"""

from __future__ import annotations

import datetime
import enum
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, EmailStr, Field

from crank.exceptions import NotFoundError
from crank.rpc import MCP, RPCApp
from crank.server import MCPConfig, RPCService


class Category(enum.StrEnum):
    books = "books"
    music = "music"
    games = "games"


class Product(BaseModel):
    id: int
    name: str
    category: Category
    price: float = Field(ge=0)
    internal_sku: str = Field(description="Warehouse code; not for the model")


class ProductCard(BaseModel):
    """What the MCP tool shows of a product: no warehouse code."""

    id: int
    name: str
    category: Category
    price: float


@dataclass
class User:
    id: int
    email: str
    name: str
    joined: datetime.date


PRODUCTS = [
    Product(id=1, name="Kobzar", category=Category.books, price=12.5, internal_sku="B-001"),
    Product(id=2, name="Forest Song", category=Category.books, price=9.0, internal_sku="B-002"),
    Product(id=3, name="Vinyl: Okean Elzy", category=Category.music, price=30.0, internal_sku="M-001"),
    Product(id=4, name="Cossacks", category=Category.games, price=19.99, internal_sku="G-001"),
]
USERS = {1: User(1, "olena@example.com", "Olena", datetime.date(2024, 3, 1))}

rpc = RPCApp(
    title="Shop",
    version="1.0.0",
    versions=("v1", "v2"),
    roles={"admin-token": ["admin"]},  # bearer tokens and their roles
)


def without_sku(products: list[dict[str, object]]) -> list[dict[str, object]]:
    return [{key: value for key, value in product.items() if key != "internal_sku"} for product in products]


@rpc.method(
    "Catalog.search",
    groups=["mcp"],
    cache=30,
    mcp=MCP(title="Search products", format="markdown", transformer=without_sku, output_schema=list[ProductCard]),
)
async def search(
    query: Annotated[str, Field(min_length=1, max_length=100)],
    category: Category | None = None,
    limit: Annotated[int, Field(gt=0, le=50)] = 10,
) -> list[Product]:
    """Search products by name.

    Returns up to `limit` products whose name contains the query, in catalog order.

    Args:
        query: Part of the product name, case-insensitive.
        category: Only products of this category.
        limit: How many products at most.
    """
    found = [p for p in PRODUCTS if query.lower() in p.name.lower() and (category is None or p.category == category)]
    return found[:limit]


@rpc.method("Catalog.get", groups=["mcp"], mcp=MCP(read_only_hint=True))
def get_product(id: int) -> Product:
    """One product by its id.

    :param id: The product's id.
    """
    for product in PRODUCTS:
        if product.id == id:
            return product
    raise NotFoundError(f"No product with id {id}")


@rpc.method("user.get", groups=["mcp"], mcp=MCP())
async def get_user(email: EmailStr) -> User:
    """Find a user by email.

    Parameters
    ----------
    email
        The user's email address.
    """
    for user in USERS.values():
        if user.email == email:
            return user
    raise NotFoundError(f"No user with email {email}")


@rpc.method("user.delete", groups=["mcp"], roles=["admin"], versions=["v2"],
            mcp=MCP(destructive_hint=True, idempotent_hint=True))  # fmt: skip
async def delete_user(id: int) -> bool:
    """Delete a user (administrators only; API v2)."""
    return USERS.pop(id, None) is not None


@rpc.method("internal.reindex", groups=["mcp"])
async def reindex() -> int:
    """Rebuild the search index. Not published over MCP: no opt-in, and internal.* is excluded."""
    return len(PRODUCTS)


app = RPCService(
    rpc,
    mcp={
        "/mcp": MCPConfig(
            group="mcp",
            enabled=True,
            exclude_prefixes=("internal.",),
            translations=Path(__file__).parent / "translations",
            default_language="en",
        )
    },
)
