"""Errors the metadata layer raises. Database errors are translated into these in one place
(`translate_integrity_error` below, used by the repository), always with `raise ... from`.

    MetaError
    ├── AlreadyExists   a unique name or key is taken
    ├── NotFound        the row, or a row it refers to, does not exist
    └── InvalidValue    a value the schema does not accept (type, policy, field name)

Each error names the `entity` ("exchange", "queue", "binding", "group", "token", "user") and the
`key` it was about, so the broker can map it onto its own API error codes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the errors are raised without SQLAlchemy too (app/meta/plain.py)
    from sqlalchemy.exc import DataError, IntegrityError


class MetaError(Exception):
    """Base class of every error of app/meta."""

    def __init__(self, message: str, *, entity: str = "", key: object = None) -> None:
        super().__init__(message)
        self.message = message
        self.entity = entity
        self.key = key

    def __repr__(self) -> str:
        return f"{type(self).__name__}(entity={self.entity!r}, key={self.key!r}, message={self.message!r})"


class AlreadyExists(MetaError):
    """Raised when a row with the same unique name or key already exists."""


class NotFound(MetaError):
    """Raised when a row, or a row it refers to (a binding's queue), does not exist."""


class InvalidValue(MetaError, ValueError):
    """Raised when a value is outside what the schema accepts (exchange type, overflow, ...)."""


# SQLSTATE classes (PostgreSQL, and drivers that expose them) and the words SQLite / MySQL use.
_UNIQUE = ("23505", "unique", "duplicate")
_FOREIGN_KEY = ("23503", "foreign key")
# PostgreSQL checks a VARCHAR's length and an integer's range itself, as a data error (class 22).
_CHECK = ("23514", "23502", "check constraint", "not null", "22001", "22003")


def translate_integrity_error(err: IntegrityError | DataError, entity: str, key: object) -> MetaError:
    """The MetaError that says what `err` (raised while writing `entity` `key`) means. Its message
    never holds the driver's text (users see it): the caller chains `err` for the log."""
    orig = err.orig
    state = str(getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None) or "")
    text = f"{state} {orig}".lower()
    if any(word in text for word in _UNIQUE):
        return AlreadyExists(f"{entity} {key!r} already exists", entity=entity, key=key)
    if any(word in text for word in _FOREIGN_KEY):
        return NotFound(f"{entity} {key!r} refers to a row that does not exist", entity=entity, key=key)
    if any(word in text for word in _CHECK):
        return InvalidValue(f"{entity} {key!r} has a value the schema rejects", entity=entity, key=key)
    return MetaError(f"{entity} {key!r} could not be written", entity=entity, key=key)
