"""64-bit integers where values pass 2**31: queue limits, ack floors and alert rule ids.

SQLite's INTEGER is 64-bit already, so this changes nothing there; on PostgreSQL INTEGER is 32-bit
(a max_bytes of 4 GiB, an offset past 2**31 or a rule id up to 2**63 - 1 would not fit).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# (table, column); alert_states.rule_id refers to alert_rules.id and changes first.
COLUMNS = (
    ("queues", "max_messages"),
    ("queues", "max_bytes"),
    ("groups", "ack_floor"),
    ("alert_states", "rule_id"),
    ("alert_rules", "id"),
    ("alert_events", "rule_id"),
)


def _alter(to: sa.types.TypeEngine[int], frm: sa.types.TypeEngine[int]) -> None:
    if op.get_bind().dialect.name == "sqlite":
        return
    for table, column in COLUMNS:
        op.alter_column(table, column, type_=to, existing_type=frm)


def upgrade() -> None:
    _alter(sa.BigInteger(), sa.Integer())


def downgrade() -> None:
    _alter(sa.Integer(), sa.BigInteger())
