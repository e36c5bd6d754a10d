"""Group state beyond the floor, and counters of messages removed before they were consumed.

groups.next_offset: the next offset to deliver for the first time (NULL: the ack floor).
groups.done: acknowledged offsets in [ack_floor, next_offset), as JSON [[start, end), ...] ranges, so
    a restart redelivers nothing whose acknowledgement was answered.
groups.missed: messages a group never consumed because they were removed first.
queues.messages_dropped: messages a queue lost to its limits, its delivery limit or the disk policy.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("queues", sa.Column("messages_dropped", sa.BigInteger(), nullable=False, server_default="0"))
    op.add_column("groups", sa.Column("next_offset", sa.BigInteger(), nullable=True))
    op.add_column("groups", sa.Column("done", sa.Text(), nullable=True))
    op.add_column("groups", sa.Column("missed", sa.BigInteger(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("groups") as batch:
        batch.drop_column("missed")
        batch.drop_column("done")
        batch.drop_column("next_offset")
    with op.batch_alter_table("queues") as batch:
        batch.drop_column("messages_dropped")
