"""Alerts: rules, the state of each (rule, queue, group), and the history of transitions and mails.

A new install gets the default rules: a group lagging 100,000 messages for 5 minutes, and a group
whose ack floor has not moved for 5 minutes while messages wait.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa

from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_KINDS = "'lag_messages', 'lag_seconds', 'stalled', 'no_consumers', 'dead_letters', 'queue_full', 'disk'"


def upgrade() -> None:
    rules = op.create_table(
        "alert_rules",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("queue", sa.String(length=200), server_default="*", nullable=False),
        sa.Column("group", sa.String(length=200), server_default="*", nullable=False),
        sa.Column("threshold", sa.Double(), nullable=False),
        sa.Column("for_seconds", sa.Double(), server_default="0", nullable=False),
        sa.Column("renotify_seconds", sa.Double(), server_default="3600", nullable=False),
        sa.Column("window_seconds", sa.Double(), server_default="300", nullable=False),
        sa.Column("recipients", sa.Text(), server_default="[]", nullable=False),
        sa.Column("enabled", sa.Boolean(), server_default="1", nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(f"kind IN ({_KINDS})", name=op.f("ck_alert_rules_kind")),
        sa.CheckConstraint(
            "threshold >= 0 AND for_seconds >= 0 AND renotify_seconds >= 0", name=op.f("ck_alert_rules_durations")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alert_rules")),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "alert_states",
        sa.Column("rule_id", sa.Integer(), nullable=False),
        sa.Column("queue", sa.String(length=200), nullable=False),
        sa.Column("group", sa.String(length=200), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("value", sa.Double(), server_default="0", nullable=False),
        sa.Column("since_ms", sa.BigInteger(), nullable=False),
        sa.Column("breach_since_ms", sa.BigInteger(), nullable=True),
        sa.Column("clear_since_ms", sa.BigInteger(), nullable=True),
        sa.Column("fired_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("notified_at_ms", sa.BigInteger(), nullable=True),
        sa.CheckConstraint("state IN ('ok', 'pending', 'firing', 'resolved')", name=op.f("ck_alert_states_state")),
        sa.ForeignKeyConstraint(
            ["rule_id"], ["alert_rules.id"], name=op.f("fk_alert_states_rule_id_alert_rules"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("rule_id", "queue", "group", name=op.f("pk_alert_states")),
    )
    op.create_table(
        "alert_events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("at_ms", sa.BigInteger(), nullable=False),
        sa.Column("type", sa.String(length=16), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("previous", sa.String(length=16), nullable=True),
        sa.Column("rule_id", sa.Integer(), nullable=True),
        sa.Column("kind", sa.String(length=32), server_default=sa.text("''"), nullable=False),
        sa.Column("queue", sa.String(length=200), server_default=sa.text("''"), nullable=False),
        sa.Column("group", sa.String(length=200), server_default=sa.text("''"), nullable=False),
        sa.Column("value", sa.Double(), nullable=True),
        sa.Column("threshold", sa.Double(), nullable=True),
        sa.Column("detail", sa.Text(), server_default=sa.text("''"), nullable=False),
        sa.CheckConstraint("type IN ('transition', 'mail')", name=op.f("ck_alert_events_type")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alert_events")),
        sqlite_autoincrement=True,
    )
    op.create_index(op.f("ix_alert_events_at_ms"), "alert_events", ["at_ms"], unique=False)
    now = datetime.now(UTC)
    defaults = {"queue": "*", "group": "*", "renotify_seconds": 3600, "window_seconds": 300, "recipients": "[]",
                "enabled": True, "created_at": now, "updated_at": now}
    op.bulk_insert(rules, [
        {"kind": "lag_messages", "threshold": 100_000, "for_seconds": 300, **defaults},
        {"kind": "stalled", "threshold": 300, "for_seconds": 0, **defaults},
    ])


def downgrade() -> None:
    op.drop_index(op.f("ix_alert_events_at_ms"), table_name="alert_events")
    op.drop_table("alert_events")
    op.drop_table("alert_states")
    op.drop_table("alert_rules")
