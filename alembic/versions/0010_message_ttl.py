"""Message expiry: a queue's message TTL.

queues.message_ttl_seconds: a message expires this long after it was published (NULL: never);
a message's own ttl_ms, stored in its headers, may make it expire sooner.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("queues", sa.Column("message_ttl_seconds", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("queues") as batch:
        batch.drop_column("message_ttl_seconds")
