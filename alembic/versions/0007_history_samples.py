"""The instants the history was sampled at, so that its rows can be sparse.

history_samples: one row per sample (step_ms = the sampling interval) and per coarse bucket
(step_ms = the downsampling step). queue_history and group_history get a row only when a queue's or
group's figures changed; its series holds that row's values at every sample after it.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "history_samples",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("step_ms", sa.Integer(), nullable=False),
        sa.Column("t", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_history_samples")),
    )
    op.create_index(op.f("ix_history_samples_step_ms_t"), "history_samples", ["step_ms", "t"])
    # The rows written so far were written at every sample: their instants are the samples'.
    op.execute("INSERT INTO history_samples (step_ms, t) SELECT DISTINCT step_ms, t FROM queue_history")


def downgrade() -> None:
    op.drop_table("history_samples")
