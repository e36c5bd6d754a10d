"""Writing DataFrames into an exchange: `df.write.format("chunkmq").option("exchange", ...)`.

Columns: `body` (string: published as text; binary: as bytes), optional `routing_key`, `headers`
(map<string,string>), `tag`. Every message carries an idempotency key made of the write's identity
and its place in it (query id, batch id, partition, row for a stream): a task or a micro-batch that
Spark runs again publishes the same keys, and the broker's dedup window stores them once.
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

    @classmethod
    def parse(cls, options: Mapping[str, str], schema: StructType) -> SinkOptions:
        o = {k.lower(): v for k, v in options.items()}
        if "exchange" not in o:
            raise OptionError('the chunkmq sink needs option("exchange", name) ("amq.default" routes by queue name)')
        fields = {f.name: f.dataType for f in schema.fields}
        if "body" not in fields or not isinstance(fields["body"], StringType | BinaryType):
            raise OptionError("the chunkmq sink needs a column body of type string or binary")
        unknown = sorted(set(fields) - _COLUMNS)
        if unknown:
            raise OptionError(f"the chunkmq sink takes the columns body, routing_key, headers, tag; not {unknown}")
        for name in ("routing_key", "tag"):
            if name in fields and not isinstance(fields[name], StringType):
                raise OptionError(f"column {name} must be a string")
        if "headers" in fields and not isinstance(fields["headers"], MapType):
            raise OptionError("column headers must be a map<string,string>")
        return cls(o.get("url", "http://127.0.0.1:8000"), o.get("token") or None, o["exchange"])


@dataclass(frozen=True)
class Published(WriterCommitMessage):
    messages: int
    duplicates: int


def publish(opts: SinkOptions, batches: Iterator[pa.RecordBatch], key_prefix: str) -> Published:
    """Publish record batches in requests of BATCH messages, row n keyed ``{key_prefix}:{n}``."""
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
            for message in _messages(batch):
                message["idempotency_key"] = f"{key_prefix}:{row}"
                row += 1
                pending.append(message)
                if len(pending) >= BATCH:
                    flush()
        flush()
    return Published(messages, duplicates)


def _messages(batch: pa.RecordBatch) -> Iterator[dict[str, Any]]:
    """One publish object per row (column by column to Python, then zipped)."""
    names = batch.schema.names
    body = batch.column(names.index("body"))
    text = pa.types.is_string(body.type) or pa.types.is_large_string(body.type)
    columns: dict[str, list[Any]] = {n: batch.column(n).to_pylist() for n in names if n != "body"}
    bodies = body.to_pylist()
    for i, value in enumerate(bodies):
        if value is None:
            raise ValueError("the body column holds a null; every message needs a body")
        m: dict[str, Any] = {"body": value} if text else {"body_base64": binascii.b2a_base64(value, newline=False).decode()}
        for name, values in columns.items():
            v = values[i]
            if v is not None:
                m[name] = dict(v) if name == "headers" else v
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
