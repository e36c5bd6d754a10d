"""The tier manifest: each sealed chunk file's object in the bucket and its upload state.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "tier_chunks",
        sa.Column("number", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("last", sa.BigInteger(), nullable=False),
        sa.Column("object_key", sa.String(length=400), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("md5", sa.String(length=32), server_default=sa.text("''"), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("updated_ms", sa.BigInteger(), nullable=False),
        sa.CheckConstraint("state IN ('local', 'uploading', 'uploaded', 'evicted')",
                           name=op.f("ck_tier_chunks_state")),
        sa.PrimaryKeyConstraint("number", name=op.f("pk_tier_chunks")),
    )


def downgrade() -> None:
    op.drop_table("tier_chunks")
