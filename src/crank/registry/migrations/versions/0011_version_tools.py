"""How many tools each published version has (`agent_versions.tools`): what building it costs, known to a
replica's index without reading the view. Versions published before are counted from their views here, once.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_BATCH = 500  # views read at a time: a registry of thousands of agents is never read whole into memory


def upgrade() -> None:
    with op.batch_alter_table("agent_versions") as batch:  # batch: SQLite alters tables by copying them
        batch.add_column(sa.Column("tools", sa.Integer, nullable=False, server_default="0"))
    connection = op.get_bind()
    versions = sa.table("agent_versions", sa.column("id", sa.String), sa.column("runtime", sa.JSON),
                        sa.column("tools", sa.Integer))  # fmt: skip
    last = ""
    while True:
        rows = connection.execute(
            sa.select(versions.c.id, versions.c.runtime)
            .where(versions.c.id > last)
            .order_by(versions.c.id)
            .limit(_BATCH)
        ).all()
        if not rows:
            return
        for identifier, runtime in rows:
            count = _tools_of(runtime)
            if count:
                connection.execute(versions.update().where(versions.c.id == identifier).values(tools=count))
        last = rows[-1][0]


def _tools_of(runtime: Any) -> int:
    view = json.loads(runtime) if isinstance(runtime, str) else runtime
    tools = view.get("tools") if isinstance(view, dict) else None
    return len(tools) if isinstance(tools, list) else 0


def downgrade() -> None:
    with op.batch_alter_table("agent_versions") as batch:
        batch.drop_column("tools")
