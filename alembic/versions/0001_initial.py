"""Initial schema: exchanges, queues, bindings, groups, users, tokens.

Revision ID: 0001
Revises:
Create Date: 2025-11-21
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _created_at() -> sa.Column[sa.DateTime]:
    return sa.Column("created_at", sa.DateTime(timezone=True), nullable=False)


def upgrade() -> None:
    op.create_table(
        "exchanges",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("type", sa.String(length=16), nullable=False),
        sa.Column("alternate_exchange", sa.String(length=200), nullable=True),
        _created_at(),
        sa.CheckConstraint("type IN ('direct', 'fanout', 'topic', 'headers', 'hash')", name=op.f("ck_exchanges_type")),
        sa.CheckConstraint("length(name) BETWEEN 1 AND 200", name=op.f("ck_exchanges_name_length")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_exchanges")),
        sa.UniqueConstraint("name", name=op.f("uq_exchanges_name")),
    )
    # AUTOINCREMENT: queue ids name storage directories and must never be handed out twice.
    op.create_table(
        "queues",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("max_messages", sa.Integer(), nullable=True),
        sa.Column("max_bytes", sa.Integer(), nullable=True),
        sa.Column("max_age_seconds", sa.Integer(), nullable=True),
        sa.Column("overflow", sa.String(length=16), server_default="drop_head", nullable=False),
        sa.Column("dead_letter_exchange", sa.String(length=200), nullable=True),
        sa.Column("dead_letter_routing_key", sa.String(length=255), nullable=True),
        sa.Column("max_deliveries", sa.Integer(), nullable=True),
        sa.Column("ack_timeout_ms", sa.Integer(), server_default="30000", nullable=False),
        sa.Column("producer_visible", sa.Boolean(), server_default="1", nullable=False),
        sa.Column("consumer_visible", sa.Boolean(), server_default="1", nullable=False),
        _created_at(),
        sa.CheckConstraint("overflow IN ('drop_head', 'reject_publish')", name=op.f("ck_queues_overflow")),
        sa.CheckConstraint("length(name) BETWEEN 1 AND 200", name=op.f("ck_queues_name_length")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_queues")),
        sa.UniqueConstraint("name", name=op.f("uq_queues_name")),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "bindings",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("exchange", sa.String(length=200), nullable=False),
        sa.Column("queue", sa.String(length=200), nullable=False),
        sa.Column("routing_key", sa.String(length=255), server_default=sa.text("''"), nullable=False),
        # Canonical JSON text (sorted keys), so the unique constraint compares argument objects.
        sa.Column("arguments", sa.Text(), server_default="{}", nullable=False),
        _created_at(),
        sa.ForeignKeyConstraint(
            ["exchange"], ["exchanges.name"], name=op.f("fk_bindings_exchange_exchanges"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(["queue"], ["queues.name"], name=op.f("fk_bindings_queue_queues"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_bindings")),
        sa.UniqueConstraint(
            "exchange", "queue", "routing_key", "arguments",
            name=op.f("uq_bindings_exchange_queue_routing_key_arguments"),
        ),
        sqlite_autoincrement=True,
    )
    op.create_index(op.f("ix_bindings_queue"), "bindings", ["queue"], unique=False)
    op.create_table(
        "groups",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("queue_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("ack_floor", sa.Integer(), server_default="0", nullable=False),
        sa.Column("start", sa.String(length=16), server_default="earliest", nullable=False),
        sa.Column("tag_filter", sa.Text(), nullable=True),
        _created_at(),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("start IN ('earliest', 'latest')", name=op.f("ck_groups_start")),
        sa.CheckConstraint("ack_floor >= 0", name=op.f("ck_groups_ack_floor")),
        sa.CheckConstraint("length(name) BETWEEN 1 AND 200", name=op.f("ck_groups_name_length")),
        sa.ForeignKeyConstraint(["queue_id"], ["queues.id"], name=op.f("fk_groups_queue_id_queues"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_groups")),
        sa.UniqueConstraint("queue_id", "name", name=op.f("uq_groups_queue_id_name")),
    )
    op.create_table(
        "users",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("password_hash", sa.String(length=255), nullable=False),
        sa.Column("is_admin", sa.Boolean(), server_default="0", nullable=False),
        _created_at(),
        sa.CheckConstraint("length(name) BETWEEN 1 AND 200", name=op.f("ck_users_name_length")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_users")),
        sa.UniqueConstraint("name", name=op.f("uq_users_name")),
    )
    op.create_table(
        "tokens",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("prefix", sa.String(length=8), nullable=False),
        sa.Column("is_admin", sa.Boolean(), server_default="0", nullable=False),
        sa.Column("configure", sa.Text(), server_default=sa.text("''"), nullable=False),
        sa.Column("write", sa.Text(), server_default=sa.text("''"), nullable=False),
        sa.Column("read", sa.Text(), server_default=sa.text("''"), nullable=False),
        _created_at(),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("length(name) BETWEEN 1 AND 200", name=op.f("ck_tokens_name_length")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tokens")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_tokens_token_hash")),
    )


def downgrade() -> None:
    op.drop_table("tokens")
    op.drop_table("users")
    op.drop_table("groups")
    op.drop_index(op.f("ix_bindings_queue"), table_name="bindings")
    op.drop_table("bindings")
    op.drop_table("queues")
    op.drop_table("exchanges")
