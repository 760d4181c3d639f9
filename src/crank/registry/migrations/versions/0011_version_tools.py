"""How many tools each published version has (`agent_versions.tools`): what building it costs, known to a
replica's index without reading the view. Versions published before are counted from their views here, once,
by the database itself (one statement: no view is read into this process).

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_COUNT = {
    "postgresql": "CASE WHEN jsonb_typeof(runtime -> 'tools') = 'array' THEN jsonb_array_length(runtime -> 'tools') "
    "ELSE 0 END",
    "sqlite": "COALESCE(json_array_length(runtime, '$.tools'), 0)",
}


def upgrade() -> None:
    with op.batch_alter_table("agent_versions") as batch:  # batch: SQLite alters tables by copying them
        batch.add_column(sa.Column("tools", sa.Integer, nullable=False, server_default="0"))
    dialect = op.get_bind().dialect.name
    if dialect == "postgresql":  # every version's view read once: longer than a request's statement timeout may be
        op.execute("SET LOCAL statement_timeout = 0")
    op.execute(f"UPDATE agent_versions SET tools = {_COUNT[dialect]}")


def downgrade() -> None:
    with op.batch_alter_table("agent_versions") as batch:
        batch.drop_column("tools")
