"""Writing DataFrames into an exchange: `df.write.format("chunkmq").option("exchange", ...)`.

Columns: `body` (string: published as text; binary: as bytes), optional `routing_key`, `headers`
(map<string,string>), `tag`. Every message carries an idempotency key made of the write's identity
and its place in it (query id, batch id, partition, row for a stream): a task or a micro-batch that
Spark runs again publishes the same keys, and the broker's dedup window stores them once. A new
write (a job run again after it failed) has a new identity: with `idempotencyKeyColumn` the key is a
column of the data instead, so the same rows get the same keys in any run.
"""

from __future__ import annotations

import binascii
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, MapType, StringType, StructType

from chunkmq.spark.http import connect
from chunkmq.spark.options import OptionError

BATCH = 1000  # messages per publish request
_COLUMNS = {"body", "routing_key", "headers", "tag"}


@dataclass(frozen=True)
class SinkOptions:
    url: str
    token: str | None
    exchange: str
    key_column: str | None = None  # idempotencyKeyColumn: each row's idempotency key

    @classmethod
    def parse(cls, options: Mapping[str, str], schema: StructType) -> SinkOptions:
        o = {k.lower(): v for k, v in options.items()}
        if "exchange" not in o:
            raise OptionError('the chunkmq sink needs option("exchange", name) ("amq.default" routes by queue name)')
        fields = {f.name: f.dataType for f in schema.fields}
        if "body" not in fields or not isinstance(fields["body"], StringType | BinaryType):
            raise OptionError("the chunkmq sink needs a column body of type string or binary")
        key = o.get("idempotencykeycolumn") or None
        if key is not None and (key not in fields or not isinstance(fields[key], StringType)):
            raise OptionError(f"idempotencyKeyColumn {key!r} must name a string column of the data")
        unknown = sorted(set(fields) - _COLUMNS - {key})
        if unknown:
            raise OptionError(f"the chunkmq sink takes the columns body, routing_key, headers, tag "
                              f"(and the idempotencyKeyColumn); not {unknown}")
        for name in ("routing_key", "tag"):
            if name in fields and not isinstance(fields[name], StringType):
                raise OptionError(f"column {name} must be a string")
        if "headers" in fields and not isinstance(fields["headers"], MapType):
            raise OptionError("column headers must be a map<string,string>")
        return cls(o.get("url", "http://127.0.0.1:8000"), o.get("token") or None, o["exchange"], key)


@dataclass(frozen=True)
class Published(WriterCommitMessage):
    messages: int
    duplicates: int


def publish(opts: SinkOptions, batches: Iterator[pa.RecordBatch], key_prefix: str) -> Published:
    """Publish record batches in requests of BATCH messages, row n keyed ``{key_prefix}:{n}`` (or by
    its idempotencyKeyColumn)."""
    row = messages = duplicates = 0
    pending: list[dict[str, Any]] = []
    with connect(opts.url, opts.token) as api:

        def flush() -> None:
            nonlocal messages, duplicates
            if pending:
                results = api.publish(opts.exchange, orjson.dumps({"messages": pending}))["results"]
                messages += len(results)
                duplicates += sum(1 for r in results if r.get("duplicate"))
                pending.clear()

        for batch in batches:
            for message in _messages(batch, opts.key_column):
                message.setdefault("idempotency_key", f"{key_prefix}:{row}")
                row += 1
                pending.append(message)
                if len(pending) >= BATCH:
                    flush()
        flush()
    return Published(messages, duplicates)


def _messages(batch: pa.RecordBatch, key_column: str | None = None) -> Iterator[dict[str, Any]]:
    """One publish object per row (column by column to Python, then zipped); the key column's value
    is the message's idempotency_key."""
    names = batch.schema.names
    body = batch.column(names.index("body"))
    text = pa.types.is_string(body.type) or pa.types.is_large_string(body.type)
    # the key column may be a message column too (routing_key, say): then it is both
    columns: dict[str, list[Any]] = {n: batch.column(n).to_pylist() for n in names if n in _COLUMNS - {"body"}}
    bodies = body.to_pylist()
    keys = batch.column(key_column).to_pylist() if key_column else None
    for i, value in enumerate(bodies):
        if value is None:
            raise ValueError("the body column holds a null; every message needs a body")
        if keys is not None and not keys[i]:
            raise ValueError(f"the idempotencyKeyColumn {key_column!r} holds a null or empty key; "
                             "every message needs one")
        m: dict[str, Any] = ({"body": value} if text
                             else {"body_base64": binascii.b2a_base64(value, newline=False).decode()})
        for name, values in columns.items():
            v = values[i]
            if v is not None:
                m[name] = dict(v) if name == "headers" else v
        if keys is not None:
            m["idempotency_key"] = keys[i]
        yield m


class BatchWriter(DataSourceArrowWriter):
    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts
        self.write_id = uuid.uuid4().hex  # made on the driver: every attempt of a task shares it

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Published:  # type: ignore[override]
        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx else 0
        return publish(self.opts, iterator, f"{self.write_id}:{partition}")


class StreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Published:  # type: ignore[override]
        ctx = TaskContext.get()
        assert ctx is not None
        # The query id survives restarts (it is in the checkpoint), and a re-run micro-batch keeps its id.
        query = ctx.getLocalProperty("sql.streaming.queryId")
        batch = ctx.getLocalProperty("streaming.sql.batchId")
        return publish(self.opts, iterator, f"{query}:{batch}:{ctx.partitionId()}")

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass  # each publish is durable on its own; nothing to make visible at the end

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass  # a re-run of the batch publishes the same keys again: the broker keeps one copy
