"""render_page: a binary pull answer rendered from columns, byte for byte render_binary's."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import numpy as np
import orjson
import pytest

from chunkmq.broker.binary_page import _gather, render_page
from chunkmq.broker.blob import encode_blob
from chunkmq.broker.broker import Broker
from chunkmq.broker.message import render_binary
from chunkmq.client import _batch
from chunkmq.storage import NewMessage, Store, StoreOptions
from chunkmq.storage.model import ColumnPage
from tests.broker.conftest import with_broker

TEXTS = ["", "plain", 'a "quoted" word', "back\\slash", "line\nbreak", "héllo ✓", "x" * 300, "tab\there"]
KEYS = ["", "k", "orders.eu", 'q"k', "ü" * 100, "r" * 260]
HEADERS = [None, {"a": "b"}, {"big": "v" * 300}, {'q"': "\n"}]
OLD = b'"exchange":"","headers":{"h":"1"},"tag":null,"routing_key":"k","body":"older \\"layout\\""'


def _escaped(text: str) -> bytes:
    return orjson.dumps(text)[1:-1]


def random_message(rng: random.Random, shape: str) -> NewMessage:
    """A stored message: `plain` (one routing key, a text body), `any` shape of blob and tag, or
    `older`: any, and now and then a blob of the older JSON-members layout."""
    if shape == "plain":
        return NewMessage(encode_blob(b"", b"k", None, b"body %06d" % rng.randrange(10**6), False), [1])
    if shape == "older" and rng.random() < 0.05:
        return NewMessage(OLD, [1], tag=b"t")
    binary = rng.random() < 0.3
    body = rng.randbytes(rng.choice([0, 5, 100, 400])) if binary else _escaped(rng.choice(TEXTS))
    headers = rng.choice(HEADERS)
    blob = encode_blob(_escaped(rng.choice(["", "ex", 'e"x'])), _escaped(rng.choice(KEYS)),
                       orjson.dumps(headers) if headers else None, body, binary)
    return NewMessage(blob, [1], tag=rng.choice([b"", b"t", "é".encode()]))


@pytest.mark.parametrize("shape", ["plain", "any", "older"])
@pytest.mark.parametrize("cache", [0, 1 << 20])
def test_render_page_is_render_binary_byte_for_byte(tmp_path: Path, shape: str, cache: int) -> None:
    rng = random.Random(f"{shape}{cache}")
    # small chunks: pages span several, and the tail cache (when on) serves the newest records
    with Store.open(tmp_path, StoreOptions(chunk_size=64 * 1024, tail_cache_bytes=cache)) as store:
        store.create_queue(1)
        store.create_queue(2)
        for _ in range(30):
            batch = [random_message(rng, shape) for _ in range(rng.randrange(1, 80))]
            store.append([*batch, NewMessage(b"\x80other queue", [2])])  # records between the queue's own
        end = store.next_offset(1)
        offset = 0
        while offset < end:
            size = rng.randrange(1, 200)
            page = store.read_columns(1, offset, size)
            stored = store.read(1, offset, size)
            counts = np.array([rng.randrange(1, 5) for _ in stored])
            expected = render_binary([(o, p, ts, tag, data, c)
                                      for (o, p, ts, _, tag, data), c in zip(stored, counts.tolist(), strict=True)])
            assert render_page(page, counts) == expected
            assert render_page(page) == render_binary([(o, p, ts, tag, data, 1) for o, p, ts, _, tag, data in stored])
            offset = int(page.offsets[-1]) + 1
    assert render_page(_empty(tmp_path)) == render_binary([])


def _empty(tmp_path: Path) -> ColumnPage:
    with Store.open(tmp_path / "empty", StoreOptions()) as store:
        store.create_queue(1)
        return store.read_columns(1, 0, 10)


def test_binary_pulls_deliver_as_json_pulls_do(tmp_path: Path) -> None:
    """Through the broker: pulls of first deliveries (the column path from COLUMNS_FROM messages),
    redeliveries due, a tag filter and small pulls (the per-record path) give what the JSON pull of
    the same group gives."""

    async def work(broker: Broker) -> None:
        await broker.declare_queue("q", {})
        rng = random.Random(7)
        messages = [{"body": rng.choice(TEXTS), "routing_key": rng.choice(KEYS[:4]), "tag": rng.choice(["a", "b"]),
                     "headers": rng.choice([{}, {"h": 'v"'}])} for _ in range(1000)]
        await broker.publish("", messages, queue_name="q")
        for name, tags in (("bin", None), ("json", None), ("bin-a", ["a"]), ("json-a", ["a"])):
            await broker.declare_group("q", name, {"tag_filter": tags} if tags else {})

        async def both(n: int, suffix: str = "") -> list[int]:
            binary = _batch.decode(await broker.pull("q", "bin" + suffix, n, 0, "c", binary=True), "q")
            plain = orjson.loads(await broker.pull("q", "json" + suffix, n, 0, "c"))["messages"]
            as_json = [{"queue": m.queue, "offset": m.offset, "id": m.id, "timestamp": m.timestamp,
                        "exchange": m.exchange, "routing_key": m.routing_key, "headers": m.headers, "tag": m.tag,
                        "body": m.body, "delivery_count": m.delivery_count} for m in binary]
            assert as_json == plain
            return [m.offset for m in binary]

        assert await both(300) == list(range(300))
        for group in ("bin", "json"):
            broker.nack("q", group, {"offsets": [3, 5]})
        assert await both(300) == [3, 5, *range(300, 598)]  # the redeliveries first, then new messages
        assert await both(300) == list(range(598, 898))
        assert await both(10, "-a") == [i for i, m in enumerate(messages) if m["tag"] == "a"][:10]
        assert await both(1000) == list(range(898, 1000))
        assert await both(1000) == []

    with_broker(tmp_path, work)


def test_gather_joins_slices_in_any_order() -> None:
    """Slices at one stride, in order with gaps, and out of order (rows of format-1 chunks sit at
    the buffer's end) are joined as a join of the slices would join them."""
    rng = random.Random(3)
    raw = rng.randbytes(5000)
    buf = np.frombuffer(raw, np.uint8)
    cases = [
        [(100 + 30 * i, 20) for i in range(50)],  # one stride, one length
        [*sorted((rng.randrange(0, 4900), 0) for _ in range(5)), (4950, 10)],  # empty slices, then one
        [(a, b - a) for a, b in itertools.pairwise(sorted(rng.sample(range(5000), 40)))][::2],  # in order
        [(4000, 50), (10, 5), (3000, 0), (2000, 100), (10, 5)],  # out of order, and twice the same
    ]
    for slices in cases:
        start, length = (np.array(column, np.int64) for column in zip(*slices, strict=True))
        assert _gather(raw, buf, start, length) == b"".join(raw[a:a + m] for a, m in slices)
