"""Consumer group semantics: pausing a group, and a single active consumer.

groups.paused: the group delivers nothing while true.
groups.paused_until_ms: epoch ms at which a timed pause ends by itself (NULL: until resumed); a
    row whose time has passed is not paused, so the timed resume needs no write.
groups.single_active_consumer: one attached consumer at a time receives the group's messages.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("groups", sa.Column("paused", sa.Boolean(), server_default="0", nullable=False))
    op.add_column("groups", sa.Column("paused_until_ms", sa.BigInteger(), nullable=True))
    op.add_column("groups", sa.Column("single_active_consumer", sa.Boolean(), server_default="0", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("groups") as batch:
        batch.drop_column("single_active_consumer")
        batch.drop_column("paused_until_ms")
        batch.drop_column("paused")
