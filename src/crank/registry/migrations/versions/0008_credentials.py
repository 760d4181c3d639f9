"""A workspace's upstream credentials by security scheme (`crank.registry.runtime.SchemeCredential`): the
references an operation that requires a scheme of its API description is published with; null: none.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workspaces") as batch:  # batch: SQLite alters tables by copying them
        batch.add_column(sa.Column("credentials", sa.JSON().with_variant(JSONB(), "postgresql"), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("workspaces") as batch:
        batch.drop_column("credentials")
