"""The audit log: every state-changing action, who did it, from where, when, and how it ended.

Revision ID: 0009
Revises: 0007
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0009"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "audit_log",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("at_ms", sa.BigInteger(), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("who", sa.String(length=200), nullable=False),
        sa.Column("address", sa.String(length=64), server_default=sa.text("''"), nullable=False),
        sa.Column("action", sa.String(length=64), nullable=False),
        sa.Column("resource", sa.Text(), server_default=sa.text("''"), nullable=False),
        sa.Column("result", sa.String(length=64), nullable=False),
        sa.CheckConstraint("source IN ('api', 'console', 'cli')", name=op.f("ck_audit_log_source")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_log")),
        sqlite_autoincrement=True,
    )
    op.create_index(op.f("ix_audit_log_at_ms"), "audit_log", ["at_ms"])
    op.create_index(op.f("ix_audit_log_who"), "audit_log", ["who"])
    op.create_index(op.f("ix_audit_log_action"), "audit_log", ["action"])


def downgrade() -> None:
    op.drop_table("audit_log")
