"""Rate limits and quotas: a workspace's (every request), its keys' default, and each API key's own
(docs/gateway.md, Rate limits and quotas). An agent's limits are in its draft and published versions.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def _json() -> sa.types.TypeEngine[Any]:
    return sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("workspaces") as batch:  # batch: SQLite alters tables by copying them
        batch.add_column(sa.Column("limits", _json(), nullable=True))
        batch.add_column(sa.Column("key_limits", _json(), nullable=True))
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("limits", _json(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("limits")
    with op.batch_alter_table("workspaces") as batch:
        batch.drop_column("key_limits")
        batch.drop_column("limits")
