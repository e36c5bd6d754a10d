"""The binary batch body (`application/vnd.chunkmq.batch`, docs/api.md "Binary batches"): the one
place that knows its layouts. The server (app/broker/message.py, binary_page.py) and the Python
client (app/client/_batch.py) both read and write batches through this module.

Integers little-endian. A batch is a record count n (u32), the records' fixed-size fields as columns
of n values each, then their variable fields, one region per field (the concatenation of that field
over the records, in order).

- Publish (`encode_publish`, `decode_publish`): columns body length u32, routing key length u16,
  flags u8; regions: routing keys (UTF-8), bodies.
- The answer to a binary publish (`encode_results`, `decode_results`): columns id u64 and
  placement count u16; then the placement count (u32), columns queue offset u64 and queue name
  length u8, and a region of queue names, every placement in message order.
- Delivered messages (`encode_delivered`, `decode_delivered`): columns offset u64, id u64,
  timestamp u64, delivery count u32, flags u8, and the lengths of exchange u8, routing key u16,
  tag u16, headers u32 and body u32; regions in that order (headers: a JSON object, empty when
  there are none).

Flag bit 0 (`BINARY`): the body is bytes, else UTF-8 text. Each column is read or written in one C
call and the lengths give every field's slice: no Python loop over the records on the way in or
out. Standard library only (numpy arrays are written when a caller hands them over).

The encoders and decoders have a compiled twin (_batchc.c), tried first where it is built and
CHUNKMQ_PURE_PYTHON is not set: it handles well-formed batches and answers None for anything else
(damaged input, values beyond a column, other types), and the Python code below runs: it stays the
reference, and every error is its own.
"""

from __future__ import annotations

import array
import functools
import itertools
import os
import struct
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple


def _compiled() -> tuple[Any, str]:
    """The compiled twin of this module's encoders and decoders (_batchc.c), or None where it is not
    built or CHUNKMQ_PURE_PYTHON is set; and which codec runs, in words."""
    if os.environ.get("CHUNKMQ_PURE_PYTHON", "") not in ("", "0"):
        return None, "pure Python (CHUNKMQ_PURE_PYTHON is set)"
    try:
        from . import _batchc
    except ImportError:
        return None, "pure Python (the compiled extension is not built)"
    return _batchc, "compiled"


_batchc, IMPLEMENTATION = _compiled()

MEDIA_TYPE = "application/vnd.chunkmq.batch"
COUNT = struct.Struct("<I")  # the record count that starts a batch (and the placement count of results)
PUBLISH_COLUMNS = "IHB"  # body length, routing key length, flags; regions: routing keys, bodies
RESULT_COLUMNS = "QH"  # id, placement count
PLACEMENT_COLUMNS = "QB"  # queue offset, queue name length; region: queue names
# offset, id, timestamp, delivery count, flags, then the lengths of the regions exchange, routing
# key, tag, headers and body
DELIVERED_COLUMNS = "QQQIBBHHII"
BINARY = 1  # record flag: the body is bytes (JSON answers give it as body_base64)
DTYPES = {"B": "u1", "H": "<u2", "I": "<u4", "Q": "<u8"}  # numpy's names of the column codes
PUBLISH_ROW = sum(struct.calcsize("<" + code) for code in PUBLISH_COLUMNS)  # column bytes per record


class MalformedBatch(ValueError):
    """A body that is not a well-formed batch (the message says what is wrong)."""


class TooManyRecords(ValueError):
    """A publish batch of more records than the receiver takes."""


def column_bytes(code: str, values: Any) -> bytes:
    """The little-endian column of `values`, each an `array`/`struct` type `code` (B, H, I, Q):
    a sequence of ints, or a numpy array (cast to the column's type)."""
    if hasattr(values, "astype"):
        return values.astype(DTYPES[code]).tobytes()  # type: ignore[no-any-return]
    column = array.array(code, values)
    if column.itemsize != struct.calcsize("<" + code):  # a platform whose C types have other sizes
        return struct.pack(f"<{len(values)}{code}", *values)
    if sys.byteorder == "big":
        column.byteswap()
    return column.tobytes()


def read_column(code: str, raw: bytes) -> list[int]:
    """The values of a little-endian column of type `code`."""
    column = array.array(code)
    size = struct.calcsize("<" + code)
    if column.itemsize != size:  # a platform whose C types have other sizes
        return list(struct.unpack(f"<{len(raw) // size}{code}", raw))
    column.frombytes(raw)
    if sys.byteorder == "big":
        column.byteswap()
    return column.tolist()


def cut_columns(buffer: bytes, start: int, count: int, codes: str) -> tuple[list[bytes], int]:
    """The raw bytes of `count` values of each column in `codes` from `start`, and where they end."""
    out = []
    for code in codes:
        end = start + count * struct.calcsize("<" + code)
        out.append(buffer[start:end])
        start = end
    return out, start


def slices(buffer: bytes, start: int, lengths: list[int]) -> Sequence[bytes]:
    """`buffer` cut into consecutive pieces of `lengths` from `start`: pieces of one length (most
    batches) by one struct call, which builds them three times faster than slicing does."""
    if _batchc is not None and (cut := _batchc.slices(buffer, start, lengths)) is not None:
        return cut  # type: ignore[no-any-return]
    if not lengths:
        return []
    if lengths.count(lengths[0]) == len(lengths):
        return _cutter(lengths[0], len(lengths)).unpack_from(buffer, start)
    ends = list(itertools.accumulate(lengths, initial=start))
    return [buffer[a:b] for a, b in itertools.pairwise(ends)]  # three times faster than map(slice)


@functools.lru_cache(maxsize=16)  # a few batch shapes repeat; a struct of 10,000 pieces takes about 400 KB
def _cutter(length: int, count: int) -> struct.Struct:
    return struct.Struct(f"{length}s" * count)


# ------------------------------------------------------------------------------------------ publish

def encode_publish(bodies: Sequence[bytes], keys: Sequence[bytes], flags: Sequence[int]) -> bytes:
    """A publish batch of these bodies, routing keys (UTF-8) and flags."""
    if _batchc is not None and (out := _batchc.encode_publish(bodies, keys, flags)) is not None:
        return out  # type: ignore[no-any-return]
    if not bodies:
        raise ValueError("a batch needs at least one message")
    columns = (list(map(len, bodies)), list(map(len, keys)), flags)
    return b"".join((COUNT.pack(len(bodies)), *map(column_bytes, PUBLISH_COLUMNS, columns), *keys, *bodies))


def encode_publish_text(lengths: list[int], key: bytes, bodies: bytes) -> bytes:
    """A publish batch of text bodies on one routing key: `bodies` joined, cut by `lengths`."""
    if _batchc is not None and (out := _batchc.encode_publish_text(lengths, key, bodies)) is not None:
        return out  # type: ignore[no-any-return]
    n = len(lengths)
    if not n:
        raise ValueError("a batch needs at least one message")
    return b"".join((COUNT.pack(n), column_bytes("I", lengths), struct.pack("<H", len(key)) * n, bytes(n),
                     key * n, bodies))


class PublishColumns(NamedTuple):
    """The columns of a publish batch, checked against its size; the regions start at keys_start
    (routing keys) and bodies_start (bodies)."""

    body_lengths: list[int]
    key_lengths: list[int]
    flags: list[int]
    keys_start: int
    bodies_start: int


def decode_publish(body: bytes, max_records: int) -> PublishColumns:
    """The columns of a publish batch. Raises MalformedBatch when the body is not one (no records,
    truncated columns, lengths that do not add up to the body, unknown flags) and TooManyRecords
    past `max_records`."""
    if _batchc is not None and (got := _batchc.decode_publish(body, max_records)) is not None:
        return PublishColumns(*got)
    if len(body) < COUNT.size:
        raise MalformedBatch("a binary batch starts with its record count (4 bytes)")
    (count,) = COUNT.unpack_from(body)
    if count == 0:
        raise MalformedBatch("a binary batch needs at least one record")
    if count > max_records:
        raise TooManyRecords(f"a batch holds at most {max_records} messages")
    keys_start = COUNT.size + count * PUBLISH_ROW
    if len(body) < keys_start:
        raise MalformedBatch(f"the record columns are truncated: {count} records need {keys_start} bytes, "
                             f"the body has {len(body)}")
    raw, _ = cut_columns(body, COUNT.size, count, PUBLISH_COLUMNS)
    body_lengths, key_lengths, flags = (read_column(code, column)
                                        for code, column in zip(PUBLISH_COLUMNS, raw, strict=True))
    bodies_start = keys_start + sum(key_lengths)
    if bodies_start + sum(body_lengths) != len(body):
        raise MalformedBatch(f"the records' lengths add up to {bodies_start + sum(body_lengths) - keys_start} bytes, "
                             f"but {len(body) - keys_start} follow the columns")
    if max(flags) > BINARY:
        raise MalformedBatch(f"record {next(i for i, f in enumerate(flags) if f > BINARY)} has unknown flags")
    return PublishColumns(body_lengths, key_lengths, flags, keys_start, bodies_start)


# ------------------------------------------------------------------------------------------ results

def encode_results(ids: Sequence[int], counts: Sequence[int] | None, offsets: Sequence[int],
                   name_lengths: bytes, names: bytes) -> bytes:
    """The answer to a binary publish: each message's id and placement count (None: one each),
    then each placement's queue offset and the length of its queue's name, and the names."""
    if _batchc is not None and (out := _batchc.encode_results(ids, counts, offsets, name_lengths, names)) is not None:
        return out  # type: ignore[no-any-return]
    n = len(ids)
    return b"".join((
        COUNT.pack(n), column_bytes("Q", ids), column_bytes("H", counts) if counts is not None else b"\x01\x00" * n,
        COUNT.pack(len(offsets)), column_bytes("Q", offsets), name_lengths, names,
    ))


def results_json(name: bytes, ids: list[int], offsets: list[int]) -> bytes:
    """The JSON form of the results of messages placed in one queue (`name`: its name as JSON), what
    a JSON publish answers (docs/api.md, Publish): `[{"id", "routed": [{"queue", "offset"}],
    "duplicate": false}, ...]`, one format call per message here, one pass in the twin."""
    if _batchc is not None and (out := _batchc.results_json(name, ids, offsets)) is not None:
        return out  # type: ignore[no-any-return]
    template = b'{"id":"%%016x","routed":[{"queue":%b,"offset":%%d}],"duplicate":false}' % name.replace(b"%", b"%%")
    return b"[%b]" % b",".join(map(template.__mod__, zip(ids, offsets, strict=True)))


class Results(NamedTuple):
    """The answer to a binary publish: per message its id and placement count, per placement (in
    message order) its queue offset and queue name."""

    ids: list[int]
    counts: list[int]
    offsets: list[int]
    names: list[bytes]


def decode_results(content: bytes) -> Results:
    """The columns of the answer to a binary publish."""
    if _batchc is not None and (got := _batchc.decode_results(content)) is not None:
        return Results(*got)
    (n,) = COUNT.unpack_from(content)
    (ids, counts), pos = cut_columns(content, COUNT.size, n, RESULT_COLUMNS)
    (p,) = COUNT.unpack_from(content, pos)
    (offsets, lengths), pos = cut_columns(content, pos + COUNT.size, p, PLACEMENT_COLUMNS)
    return Results(read_column("Q", ids), read_column("H", counts), read_column("Q", offsets),
                   list(slices(content, pos, read_column("B", lengths))))


# ---------------------------------------------------------------------------------------- delivered

def encode_delivered(n: int, columns: Sequence[Any], regions: Sequence[bytes]) -> bytes:
    """A batch of `n` delivered messages: the columns in DELIVERED_COLUMNS order (each a sequence of
    ints or a numpy array, or bytes already encoded), then the regions exchange, routing key, tag,
    headers and body, each joined."""
    if _batchc is not None and (out := _batchc.encode_delivered(n, columns, regions)) is not None:
        return out  # type: ignore[no-any-return]
    if len(columns) != len(DELIVERED_COLUMNS) or len(regions) != 5:
        raise ValueError("a delivered batch has 10 columns and 5 regions")
    encoded = [c if type(c) is bytes else column_bytes(code, c)
               for code, c in zip(DELIVERED_COLUMNS, columns, strict=True)]
    return b"".join((COUNT.pack(n), *encoded, *regions))


_ONE_ROW = struct.Struct("<I" + DELIVERED_COLUMNS)  # a count of 1, then the one row of every column


def encode_delivered_one(row: Sequence[int], regions: Sequence[bytes]) -> bytes:
    """encode_delivered of one message: its row of the columns (in DELIVERED_COLUMNS order) and its
    five regions, packed at once (a stream's usual delivery at low rates)."""
    return b"".join((_ONE_ROW.pack(1, *row), *regions))


@dataclass(slots=True)
class Delivered:
    """The fields of a batch of delivered messages. A region whose values are all empty (no tags,
    no headers, the default exchange) is None; ids and flags stay raw columns, decoded on demand."""

    offsets: list[int]
    ids: bytes  # u64 little-endian each
    timestamps: list[int]
    delivery_counts: list[int]
    flags: bytes  # one byte each
    exchanges: list[bytes] | None
    routing_keys: list[bytes] | None
    tags: list[bytes] | None
    headers: list[bytes] | None
    body_lengths: list[int]
    bodies: bytes  # the body region, every body joined


def decode_delivered(batch: bytes) -> Delivered:
    """The fields of a batch of delivered messages (columns are decoded only where needed)."""
    if _batchc is not None and (got := _batchc.decode_delivered(batch)) is not None:
        return Delivered(*got)
    (n,) = COUNT.unpack_from(batch)
    cols, pos = cut_columns(batch, COUNT.size, n, DELIVERED_COLUMNS)
    regions: list[list[bytes] | None] = []
    for code, column in zip(DELIVERED_COLUMNS[5:9], cols[5:9], strict=True):
        if column.count(0) == len(column):  # every value empty: no need to cut the region
            regions.append(None)
            continue
        lengths = read_column(code, column)
        regions.append(list(slices(batch, pos, lengths)))
        pos += sum(lengths)
    body_lengths = read_column("I", cols[9])
    # *regions: the four region fields
    return Delivered(read_column("Q", cols[0]), cols[1], read_column("Q", cols[2]), read_column("I", cols[3]), cols[4],  # type: ignore[call-arg]
                     *regions, body_lengths, batch[pos:pos + sum(body_lengths)])  # type: ignore[arg-type]
