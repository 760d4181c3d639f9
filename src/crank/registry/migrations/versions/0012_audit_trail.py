"""The audit trail of tool calls: batches of consecutive records (`audit_batches`), chained by hash per
workspace, and each workspace's last record (`audit_heads`), which appends lock.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "audit_batches",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("workspace", sa.String(64), nullable=False, index=True),
        sa.Column("first_seq", sa.BigInteger, nullable=False),
        sa.Column("last_seq", sa.BigInteger, nullable=False),
        sa.Column("first_at", sa.BigInteger, nullable=False),
        sa.Column("last_at", sa.BigInteger, nullable=False, index=True),
        sa.Column("records", sa.Text, nullable=False),
        sa.Column("prev_hash", sa.String(64), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
        sa.UniqueConstraint("workspace", "first_seq"),
        sa.CheckConstraint("first_seq >= 1 AND last_seq >= first_seq", name="audit_batches_numbered"),
    )
    op.create_table(
        "audit_heads",
        sa.Column("workspace", sa.String(64), primary_key=True),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("audit_heads")
    op.drop_table("audit_batches")
