"""Search (app/broker/search.py) on a real broker: every filter against a plain-Python oracle over
what was published, the range, the budgets and the cursor that resumes a scan, and strict checks."""

from __future__ import annotations

import asyncio
import base64
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkmq.broker import search
from chunkmq.broker.blob import encode_blob
from chunkmq.broker.broker import Broker
from chunkmq.broker.errors import InvalidInput
from chunkmq.broker.message import FLAG_SCOPED_KEY
from tests.broker.conftest import with_broker

MESSAGES: list[dict[str, Any]] = [
    {"body": "order 17 created", "routing_key": "orders.eu", "headers": {"region": "eu", "prio": "high"},
     "tag": "created", "idempotency_key": "o-17"},
    {"body": "ORDER 18 Created", "routing_key": "orders.us", "headers": {"region": "us"}, "tag": "created"},
    {"body": "payment for order 17", "routing_key": "payments.eu", "tag": "paid", "idempotency_key": "p-17"},
    {"body_base64": base64.b64encode(b"\x00\x01order\xff").decode(), "routing_key": "blobs"},
    {"body": "caf\u00e9 \"quoted\" \\ back", "routing_key": "orders.eu", "headers": {"n\u00e9": "v\"q"}},
    {"body": "{\"order\": {\"total\": 120}}", "routing_key": "orders.json", "tag": "created.json"},
    {"body": "no match here", "routing_key": ""},
]


async def _offsets(broker: Broker, body: dict[str, Any]) -> list[int]:
    result = await search.search(broker, broker.queue("q").id, search.parse(body))
    return [m[0] for m in result.found]


@pytest.mark.parametrize(("body", "expected"), [
    ({}, [0, 1, 2, 3, 4, 5, 6]),
    ({"body_contains": "order"}, [0, 2, 3, 5]),  # a binary body's bytes too
    ({"body_contains": "order", "ignore_case": True}, [0, 1, 2, 3, 5]),
    ({"body_contains_base64": base64.b64encode(b"\x01order").decode()}, [3]),
    ({"body_contains_base64": base64.b64encode(b"ORDER").decode(), "ignore_case": True}, [0, 1, 2, 3, 5]),
    ({"body_contains": "\"quoted\" \\"}, [4]),
    ({"body_contains": "caf\u00e9"}, [4]),
    ({"body_contains": "CAF\u00c9", "ignore_case": True}, [4]),
    ({"body_regex": r"order \d+ (created|paid)"}, [0]),
    ({"body_regex": r"^order \d+", "ignore_case": True}, [0, 1]),
    ({"header_equals": {"region": "eu"}}, [0]),
    ({"header_equals": {"n\u00e9": "v\"q"}}, [4]),
    ({"header_exists": ["region"]}, [0, 1]),
    ({"header_exists": ["region", "prio"]}, [0]),
    ({"routing_key": "orders.eu"}, [0, 4]),
    ({"routing_key": ""}, [6]),
    ({"routing_key_prefix": "orders."}, [0, 1, 4, 5]),
    ({"tag": "created"}, [0, 1]),
    ({"tag_prefix": "created"}, [0, 1, 5]),
    ({"tag": "created", "body_contains": "17"}, [0]),
    ({"routing_key_prefix": "orders", "header_equals": {"region": "us"}, "body_regex": "Created"}, [1]),
    ({"from_offset": 2, "to_offset": 5}, [2, 3, 4]),
    ({"json_path": "$.order.total > 100"}, [5]),
    ({"json_path": ["$.order.total >= 120", "$.order.total < 120.5", "$[\"order\"] != null"]}, [5]),
    ({"json_path": "$.order.total == 120.0"}, [5]),
    ({"json_path": "$.order.total > 120"}, []),
    ({"json_path": "$.order != {\"total\": 120}"}, []),
    ({"json_path": "$.order.missing != 1"}, []),  # nothing at the path: no match, != included
    ({"body_contains": "nowhere"}, []),
])
def test_each_filter_finds_what_an_oracle_finds(tmp_path: Path, body: dict[str, Any], expected: list[int]) -> None:
    async def work(broker: Broker) -> None:
        await broker.declare_queue("q", {})
        await broker.publish("", MESSAGES, queue_name="q")
        assert await _offsets(broker, body) == expected

    with_broker(tmp_path, work)


def test_message_id_and_idempotency_key(tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        await broker.declare_queue("q", {})
        await broker.declare_queue("other", {})
        await broker.publish("", [{"body": "elsewhere"}], queue_name="other")
        await broker.publish("", MESSAGES, queue_name="q")
        page = orjson.loads(broker.browse("q", 0, None, 10))["messages"]
        assert await _offsets(broker, {"message_id": page[2]["id"]}) == [2]
        assert await _offsets(broker, {"message_id": page[2]["id"].upper(), "from_offset": 3}) == []
        assert await _offsets(broker, {"message_id": "7fffffffffffffff"}) == []  # no such record
        other = orjson.loads(broker.browse("other", 0, None, 1))["messages"][0]["id"]
        assert await _offsets(broker, {"message_id": other}) == []  # a record of another queue
        assert await _offsets(broker, {"idempotency_key": "o-17"}) == [0]
        assert await _offsets(broker, {"idempotency_key": "p-17", "tag": "paid"}) == [2]
        assert await _offsets(broker, {"idempotency_key": "q/q/o-17"}) == []  # the scope is not part of it

    with_broker(tmp_path, work)


@pytest.mark.parametrize(("test", "document", "hit"), [
    ("$.a == 1", {"a": 1.0}, True),
    ("$.a == 1", {"a": True}, False),  # JSON: a boolean is not a number
    ("$.a == true", {"a": True}, True),
    ("$.a[1].b == \"x\"", {"a": [0, {"b": "x"}]}, True),
    ("$.a[2] == 0", {"a": [0]}, False),
    ("$.a.b == 1", {"a": [1]}, False),
    ("$.a < \"b\"", {"a": "a"}, True),
    ("$.a < 1", {"a": "0"}, False),  # a string is not below a number
    ("$.a <= 1", {"a": 1}, True),
    ("$.a >= 2", {"a": 1}, False),
    ("$ == [1, 2]", [1, 2], True),
    ("$ != [1, 2]", [1, True], True),
    ("$.x == null", {"x": None}, True),
])
def test_json_path_comparisons(test: str, document: Any, hit: bool) -> None:
    assert search.JsonTest.parse(test).matches(document) is hit


def test_bare_key_drops_the_scope_only_of_scoped_keys() -> None:
    assert search.bare_key(b"x/orders/k/1", FLAG_SCOPED_KEY) == "k/1"
    assert search.bare_key(b"x/orders/k/1", 0) == "x/orders/k/1"


def test_time_range(tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        await broker.declare_queue("q", {})
        await broker.publish("", [{"body": "a"}], queue_name="q")
        page = orjson.loads(broker.browse("q", 0, None, 1))["messages"]
        first_ts = page[0]["timestamp"]
        await asyncio.sleep(0.01)
        await broker.publish("", [{"body": "b"}, {"body": "c"}], queue_name="q")
        later = orjson.loads(broker.browse("q", 1, None, 1))["messages"][0]["timestamp"]
        assert later > first_ts
        assert await _offsets(broker, {"from_timestamp": later}) == [1, 2]
        assert await _offsets(broker, {"to_timestamp": later}) == [0]
        assert await _offsets(broker, {"from_timestamp": later, "to_offset": 2}) == [1]

    with_broker(tmp_path, work)


def test_pages_resume_with_the_cursor_until_the_range_is_done(tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        await broker.declare_queue("q", {})
        bodies = [{"body": f"m{i} {'hit' if i % 7 == 0 else 'miss'}"} for i in range(3000)]
        await broker.publish("", bodies, queue_name="q")
        qid = broker.queue("q").id
        expected = [i for i in range(3000) if i % 7 == 0]
        got: list[int] = []
        request: dict[str, Any] = {"body_contains": "hit", "limit": 50, "max_scan": 500}
        pages = 0
        while True:
            result = await search.search(broker, qid, search.parse(request))
            pages += 1
            got += [m[0] for m in result.found]
            assert result.scanned <= 500 and len(result.found) <= 50
            assert result.stopped in ("limit", "max_scan", "end")
            if result.cursor is None:
                assert result.stopped == "end" and result.next_offset == 3000
                break
            # a producer during the search does not make it longer: the cursor keeps the end
            await broker.publish("", [{"body": "late hit"}], queue_name="q")
            request = {"cursor": result.cursor, "limit": 50, "max_scan": 500}
        assert got == expected and pages > 6

    with_broker(tmp_path, work)


def test_the_time_budget_stops_a_scan_with_a_cursor(tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        await broker.declare_queue("q", {})
        await broker.publish("", [{"body": f"m{i}"} for i in range(5000)], queue_name="q")
        qid = broker.queue("q").id
        query = search.parse({"body_regex": "never[0-9]+", "max_ms": 1})
        real = time.perf_counter
        calls = iter(range(10**6))
        search.time.perf_counter = lambda: real() + next(calls)  # type: ignore[attr-defined]  # every look: 1 s on
        try:
            result = await search.search(broker, qid, query)
        finally:
            search.time.perf_counter = real  # type: ignore[attr-defined]
        assert result.stopped == "max_ms" and result.scanned == search.SLICE and result.cursor
        rest = await search.search(broker, qid, search.parse({"cursor": result.cursor, "max_ms": 10_000}))
        assert rest.stopped == "end" and rest.scanned == 5000 - search.SLICE and not rest.found

    with_broker(tmp_path, work)


def test_the_prefilter_never_refuses_a_match() -> None:
    """A blob without the needle's bytes is skipped undecoded; one with escapes is always decoded."""
    m = search.Matcher(search.parse({"body_contains": "\u00e9t\u00e9", "header_exists": ["k"]}))
    plain = encode_blob(b"", b"", b'{"k":"v"}', "\u00e9t\u00e9 x".encode(), False)
    escaped = encode_blob(b"", b"", b'{"k":"v"}', b"\\u00e9t\\u00e9 x", False)  # as a producer may send it
    other = encode_blob(b"", b"", b'{"k":"v"}', b"summer", False)
    assert m.prefilter(plain) and m.prefilter(escaped) and not m.prefilter(other)
    for data, hit in ((plain, True), (escaped, True), (other, False)):
        assert m.matches((0, 0, 0, 0, b"", data), lambda _: (b"", 0)) is hit


@pytest.mark.parametrize(("body", "field"), [
    ({"nope": 1}, "nope"),
    ({"body_contains": ""}, "body_contains"),
    ({"body_contains": 5}, "body_contains"),
    ({"body_contains": "a", "body_contains_base64": "YQ=="}, "body_contains_base64"),
    ({"body_contains_base64": "not base64!"}, "body_contains_base64"),
    ({"ignore_case": "yes"}, "ignore_case"),
    ({"body_regex": "(a"}, "body_regex"),
    ({"body_regex": "(a)\\1"}, "body_regex"),  # a back-reference: not RE2
    ({"body_regex": "(?=a)b"}, "body_regex"),  # look-ahead: not RE2
    ({"body_regex": "((a{100}){100}){100}"}, "body_regex"),  # over the program budget
    ({"header_equals": {"k": 1}}, "header_equals"),
    ({"header_equals": {}}, "header_equals"),
    ({"header_exists": "k"}, "header_exists"),
    ({"routing_key": None}, "routing_key"),
    ({"tag": ""}, "tag"),
    ({"message_id": "xyz"}, "message_id"),
    ({"json_path": "order.total > 1"}, "json_path"),
    ({"json_path": "$.a ~ 1"}, "json_path"),
    ({"json_path": "$.a > true"}, "json_path"),
    ({"json_path": "$.a == nope"}, "json_path"),
    ({"json_path": "$[\"\\ud800\"] == 1"}, "json_path"),
    ({"json_path": []}, "json_path"),
    ({"json_path": [1]}, "json_path"),
    ({"from_offset": -1}, "from_offset"),
    ({"to_timestamp": 1.5}, "to_timestamp"),
    ({"limit": 0}, "limit"),
    ({"limit": 1001}, "limit"),
    ({"max_scan": True}, "max_scan"),
    ({"max_ms": 10_001}, "max_ms"),
    ({"cursor": "!!"}, "cursor"),
    ({"cursor": base64.urlsafe_b64encode(b"[1]").decode()}, "cursor"),
    ({"cursor": search.make_cursor(search.Query(), 0, 1), "tag": "t"}, "cursor"),
    ({"cursor": base64.urlsafe_b64encode(b'{"limit": 0}').decode()}, "limit"),  # a cursor is checked as a body
])
def test_bad_requests_name_their_field(body: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        search.parse(body)
    assert field in str(caught.value)


def test_a_cursor_carries_the_filters() -> None:
    query = search.parse({"body_contains_base64": "AAE=", "ignore_case": True, "header_equals": {"a": "b"},
                          "header_exists": ["c"], "routing_key": "", "tag_prefix": "t",
                          "message_id": "00000000000000AB", "idempotency_key": "k", "body_regex": "x+",
                          "json_path": "$.a > 1"})
    again = search.parse({"cursor": search.make_cursor(query, 5, 9), "limit": 7})
    assert again.filters() == query.filters()
    assert (again.from_offset, again.to_offset, again.limit) == (5, 9, 7)


_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=20),
                       lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                   max_size=3), max_leaves=6)
_BODIES = st.dictionaries(st.sampled_from([*search.FIELDS, "other"]), _VALUES | st.text(max_size=40), max_size=5)


@settings(max_examples=400, deadline=None)
@given(body=_BODIES)
def test_any_request_is_a_query_or_a_400_and_its_cursor_gives_it_back(body: dict[str, Any]) -> None:
    """Fuzzed: parse refuses with InvalidInput (never another error) or gives a query whose cursor
    parses back to the same filters."""
    try:
        query = search.parse(body)
    except InvalidInput:
        return
    search.Matcher(query)  # what parse accepts compiles
    again = search.parse({"cursor": search.make_cursor(query, 3, 7)})
    assert again.filters() == query.filters() and (again.from_offset, again.to_offset) == (3, 7)


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet='$.[]"\\0123456789abc =!<>-eE+tfnrul', max_size=30))
def test_any_json_path_text_is_a_comparison_or_a_400(text: str) -> None:
    try:
        test = search.JsonTest.parse(text)
    except InvalidInput:
        return
    assert test.op in ("==", "!=", "<", "<=", ">", ">=")
    test.matches({"a": [1, "b", None], "b": {"c": 2.5}})
