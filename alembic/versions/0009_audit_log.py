"""The audit log: every state-changing action, who did it, from where, when, and how it ended; and
the alert rule kind time_to_clear (the CHECK on alert_rules.kind names it).

SQLite cannot alter a CHECK: the table's stored SQL is edited instead (see _kinds).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_KINDS = ("lag_messages", "lag_seconds", "stalled", "no_consumers", "dead_letters", "queue_full", "disk")
_NEW_KINDS = (*_KINDS, "time_to_clear")


def _in(kinds: tuple[str, ...]) -> str:
    return f"kind IN ({', '.join(repr(k) for k in kinds)})"


def _kinds(old: tuple[str, ...], new: tuple[str, ...]) -> None:
    bind = op.get_bind()
    if bind.dialect.name != "sqlite":
        op.drop_constraint(op.f("ck_alert_rules_kind"), "alert_rules", type_="check")
        op.create_check_constraint(op.f("ck_alert_rules_kind"), "alert_rules", _in(new))
        return
    # SQLite's way to change a CHECK its rows already meet (lang_altertable.html, "Making Other Kinds
    # Of Table Schema Changes"): edit the table's stored SQL and bump the schema version. Rebuilding
    # the table instead would delete its alert states (ON DELETE CASCADE) or repoint their key.
    sql = bind.exec_driver_sql("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'alert_rules'").scalar()
    changed = str(sql).replace(_in(old), _in(new))
    assert changed != sql, "alert_rules' CHECK on kind is not the one expected"
    version = bind.exec_driver_sql("PRAGMA schema_version").scalar()
    bind.exec_driver_sql("PRAGMA writable_schema=ON")
    bind.execute(sa.text("UPDATE sqlite_master SET sql = :sql WHERE type = 'table' AND name = 'alert_rules'"),
                 {"sql": changed})
    bind.exec_driver_sql(f"PRAGMA schema_version={int(version) + 1}")
    bind.exec_driver_sql("PRAGMA writable_schema=OFF")


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
    _kinds(_KINDS, _NEW_KINDS)


def downgrade() -> None:
    op.execute("DELETE FROM alert_rules WHERE kind = 'time_to_clear'")
    _kinds(_NEW_KINDS, _KINDS)
    op.drop_table("audit_log")
