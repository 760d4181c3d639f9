"""A workspace's OAuth policy (`crank.registry.runtime.OAuthPolicy`): the issuers whose access tokens it trusts,
its audience base URL, and the scopes its agents and tools need; null: API keys only.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workspaces") as batch:  # batch: SQLite alters tables by copying them
        batch.add_column(sa.Column("oauth", sa.JSON().with_variant(JSONB(), "postgresql"), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("workspaces") as batch:
        batch.drop_column("oauth")
