"""Errors of the Spark connector and jobs, in a module that imports neither PySpark nor httpx, so
the one error map (app/api/errors.py) names them without loading Spark.

    ChunkmqError (RuntimeError)  an error answer of the broker, with its API code
    DataLoss (RuntimeError)      offsets the query needs are gone and failOnDataLoss is true
    ReadFailed (RuntimeError)    a read task could not get its messages from the broker
    OptionError (ValueError)     a `format("chunkmq")` option that cannot be used
"""

from __future__ import annotations

__all__ = ["ChunkmqError", "DataLoss", "OptionError", "ReadFailed"]


class ChunkmqError(RuntimeError):
    """An error answer of the broker, with its API code."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"chunkmq answered {status} {code}: {message}")
        self.status = status
        self.code = code


class DataLoss(RuntimeError):
    """Offsets the query needs are gone (retention, purge, a deleted queue) and failOnDataLoss is true."""


class ReadFailed(RuntimeError):
    """A read task could not get its messages from the broker (down, killed, unreachable, an error
    answer): says which broker, queue and offsets."""


class OptionError(ValueError):
    """A `format("chunkmq")` option that cannot be used."""
