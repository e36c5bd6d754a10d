"""Database errors translated into MetaErrors (app/meta/errors.py): what each SQLSTATE or driver
wording means, the entity and key kept, and never the driver's text in the message."""

from __future__ import annotations

import sqlite3

import pytest
from sqlalchemy.exc import DataError, IntegrityError

from chunkmq.meta.errors import AlreadyExists, InvalidValue, MetaError, NotFound, translate_integrity_error

SECRET = "driver detail /var/lib/secret"


class PgError(Exception):
    """A driver error that carries a SQLSTATE, as psycopg's do."""

    def __init__(self, sqlstate: str) -> None:
        super().__init__(SECRET)
        self.sqlstate = sqlstate


@pytest.mark.parametrize(("orig", "expected"), [
    (sqlite3.IntegrityError(f"UNIQUE constraint failed: queues.name {SECRET}"), AlreadyExists),
    (sqlite3.IntegrityError(f"FOREIGN KEY constraint failed {SECRET}"), NotFound),
    (sqlite3.IntegrityError(f"CHECK constraint failed: ck_overflow {SECRET}"), InvalidValue),
    (sqlite3.IntegrityError(f"NOT NULL constraint failed {SECRET}"), InvalidValue),
    (PgError("23505"), AlreadyExists),
    (PgError("23503"), NotFound),
    (PgError("22001"), InvalidValue),  # a value too long for its VARCHAR
    (sqlite3.IntegrityError(f"something else {SECRET}"), MetaError),
])
def test_each_database_error_gets_its_meaning_and_no_driver_text(orig: Exception, expected: type[MetaError]) -> None:
    error = translate_integrity_error(IntegrityError("INSERT ...", {}, orig), "queue", "orders")
    assert type(error) is expected
    assert (error.entity, error.key) == ("queue", "orders") and "'orders'" in error.message
    assert SECRET not in error.message and "constraint" not in error.message.lower()


def test_a_data_error_is_translated_too() -> None:
    error = translate_integrity_error(DataError("INSERT ...", {}, PgError("22003")), "queue", "q")
    assert isinstance(error, InvalidValue) and isinstance(error, ValueError)


def test_repr_names_entity_key_and_message() -> None:
    assert repr(NotFound("user 'x' does not exist", entity="user", key="x")) == (
        "NotFound(entity='user', key='x', message=\"user 'x' does not exist\")")
