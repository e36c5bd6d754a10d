"""History of queue and group metrics (app/broker/history.py), written behind by the broker.

queue_history / group_history: one row per sampled point, at the fine resolution (step_ms = the
sampling interval) or the coarse one (step_ms = the downsampling step), pruned by age. Deleting a
queue or a group deletes its history (ON DELETE CASCADE).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "queue_history",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("queue_id", sa.Integer(), nullable=False),
        sa.Column("step_ms", sa.Integer(), nullable=False),
        sa.Column("t", sa.BigInteger(), nullable=False),
        sa.Column("messages", sa.Double(), nullable=False),
        sa.Column("bytes", sa.Double(), nullable=False),
        sa.Column("publish_rate", sa.Double(), nullable=False),
        sa.Column("deliver_rate", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(
            ["queue_id"], ["queues.id"], name=op.f("fk_queue_history_queue_id_queues"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_queue_history")),
    )
    op.create_index(op.f("ix_queue_history_queue_id_step_ms_t"), "queue_history", ["queue_id", "step_ms", "t"])
    op.create_index(op.f("ix_queue_history_t"), "queue_history", ["t"])
    op.create_table(
        "group_history",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("queue_id", sa.Integer(), nullable=False),
        sa.Column("group_name", sa.String(length=200), nullable=False),
        sa.Column("step_ms", sa.Integer(), nullable=False),
        sa.Column("t", sa.BigInteger(), nullable=False),
        sa.Column("lag", sa.Double(), nullable=False),
        sa.Column("lag_seconds", sa.Double(), nullable=False),
        sa.Column("ack_rate", sa.Double(), nullable=False),
        sa.Column("consumers", sa.Double(), nullable=False),
        sa.Column("ack_floor", sa.BigInteger(), nullable=False),
        sa.Column("floor_moved_at", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["queue_id", "group_name"], ["groups.queue_id", "groups.name"],
            name=op.f("fk_group_history_queue_id_groups"), ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_group_history")),
    )
    op.create_index(
        op.f("ix_group_history_queue_id_group_name_step_ms_t"), "group_history",
        ["queue_id", "group_name", "step_ms", "t"],
    )
    op.create_index(op.f("ix_group_history_t"), "group_history", ["t"])


def downgrade() -> None:
    op.drop_table("group_history")
    op.drop_table("queue_history")
