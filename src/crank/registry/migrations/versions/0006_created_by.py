"""Which tool made a workspace (`created_by`): `crank serve --openapi` writes only into a workspace it made
itself (crank.instant); null for every other workspace.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workspaces") as batch:  # batch: SQLite alters tables by copying them
        batch.add_column(sa.Column("created_by", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("workspaces") as batch:
        batch.drop_column("created_by")
