"""The change log: what each generation changed (an agent, a workspace's policy or limits, an API key), so that
a replica reloads only that (`Registry.changes_since`). The log starts at the generation of the upgrade:
replicas behind it reload everything once, as before.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "registry_changes",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("generation", sa.Integer, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("workspace", sa.String(64), nullable=False),
        sa.Column("name", sa.String(128), nullable=True),
    )
    op.create_index("ix_registry_changes_generation", "registry_changes", ["generation"])
    with op.batch_alter_table("registry_state") as batch:  # batch: SQLite alters tables by copying them
        batch.add_column(sa.Column("changes_from", sa.Integer, nullable=False, server_default="0"))
    op.execute("UPDATE registry_state SET changes_from = generation")


def downgrade() -> None:
    with op.batch_alter_table("registry_state") as batch:
        batch.drop_column("changes_from")
    op.drop_index("ix_registry_changes_generation", "registry_changes")
    op.drop_table("registry_changes")
