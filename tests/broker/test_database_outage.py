"""A real server with its metadata on a real PostgreSQL that is stopped for a few seconds under load:
publishing and consuming go on, what only the database can answer fails with a clear 503, nothing
acknowledged is lost, and the broker recovers by itself when PostgreSQL is back (docs/metadata.md).

`CHUNKMQ_TEST_OUTAGE_SECONDS=10 pytest -s tests/broker/test_database_outage.py` runs the 10-second
outage docs/metadata.md reports, and prints what it measured.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.api.client import error, ok
from tests.pg import PgCluster
from tests.server import ServerProcess

OUTAGE_SECONDS = float(os.environ.get("CHUNKMQ_TEST_OUTAGE_SECONDS", "3"))
BATCH = 100


@dataclass
class Load:
    """What a publisher and a consumer saw, each on its own thread and connection."""

    stop: threading.Event = field(default_factory=threading.Event)
    published: list[str] = field(default_factory=list)  # bodies whose publish was answered 2xx
    publish_times: list[float] = field(default_factory=list)  # when each answered batch was answered
    publish_errors: list[tuple[int, str]] = field(default_factory=list)  # (status, error code)
    consumed: set[str] = field(default_factory=set)
    consume_errors: list[tuple[int, str]] = field(default_factory=list)


def _code(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return response.text[:100]


def publish(server: ServerProcess, queue: str, load: Load) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as api:
        n = 0
        while not load.stop.is_set():
            bodies = [f"m{n + i}" for i in range(BATCH)]
            r = api.post(f"/api/v1/queues/{queue}/publish", json={"messages": [{"body": b} for b in bodies]})
            if r.status_code // 100 == 2:
                load.published += bodies
                load.publish_times.append(time.monotonic())
            else:
                load.publish_errors.append((r.status_code, _code(r)))
            n += BATCH


def consume(server: ServerProcess, queue: str, load: Load, drain: bool = False) -> None:
    """Pull and ack until `load.stop`, or (`drain`) until every body `load` published arrived."""
    deadline = time.monotonic() + 60
    with httpx.Client(base_url=server.url, timeout=30) as api:
        while not load.stop.is_set() and time.monotonic() < deadline:
            r = api.post(f"/api/v1/queues/{queue}/groups/g/pull",
                         json={"max_messages": 1000, "wait_ms": 200, "consumer": "c"})
            if r.status_code != 200:
                load.consume_errors.append((r.status_code, _code(r)))
                continue
            messages = r.json()["messages"]
            if messages:
                load.consumed.update(m["body"] for m in messages)
                a = api.post(f"/api/v1/queues/{queue}/groups/g/ack", json={"offsets": [m["offset"] for m in messages]})
                if a.status_code != 200:
                    load.consume_errors.append((a.status_code, _code(a)))
            elif drain and set(load.published) <= load.consumed:
                return


@pytest.fixture
def cluster() -> Iterator[PgCluster]:
    """A PostgreSQL server of this test's own: it is stopped and started again."""
    pg = PgCluster().init().start()
    yield pg
    pg.remove()


def test_a_stopped_database_stops_neither_publishing_nor_consuming_and_the_broker_recovers(
    tmp_path: Path, cluster: PgCluster
) -> None:
    server = ServerProcess(tmp_path / "data", CHUNKMQ_AUTH="off", CHUNKMQ_DATABASE_URL=cluster.url()).start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as api:
            ok(api.put("/api/v1/queues/orders", json={}), 201)
            ok(api.put("/api/v1/queues/orders/groups/g", json={}), 201)
            load = Load()
            threads = [threading.Thread(target=publish, args=(server, "orders", load)),
                       threading.Thread(target=consume, args=(server, "orders", load))]
            started = time.monotonic()
            for t in threads:
                t.start()
            time.sleep(1)

            cluster.stop()
            down = time.monotonic()
            # what needs the database answers 503 at once, with API.md's error shape
            error(api.put("/api/v1/queues/during", json={}), 503, "unavailable")
            time.sleep(OUTAGE_SECONDS)
            cluster.start()
            up = time.monotonic()
            while api.put("/api/v1/queues/after", json={}).status_code == 503:  # no restart of the broker
                assert time.monotonic() - up < 10, "the broker did not reconnect to PostgreSQL"
                time.sleep(0.05)
            recovered = time.monotonic() - up
            time.sleep(1)
            load.stop.set()
            for t in threads:
                t.join(30)

            # every publish went through, and every message acknowledged to its publisher was delivered
            assert load.publish_errors == [] and load.consume_errors == []
            during = sum(down < t < up for t in load.publish_times) * BATCH
            before = sum(t < down for t in load.publish_times) * BATCH
            assert during > 0
            load.stop.clear()
            consume(server, "orders", load, drain=True)
            assert set(load.published) <= load.consumed
            print(f"\n{before / (down - started):.0f} messages/s published before the outage, "
                  f"{during / (up - down):.0f}/s during its {up - down:.1f} s; {len(load.published)} published "
                  f"in all, none lost; admin calls answered again {recovered:.2f} s after PostgreSQL was back")

        # the acknowledgements reached PostgreSQL once it was back: a crash now redelivers nothing
        time.sleep(2.5)  # two group-commit rounds
        log = server.log()  # one traceback for the outage, not ten a second
        assert log.count("writing consumer group state failed") == 1, log[-5000:]
        assert "consumer group state written again" in log
        server.kill()
        server.start()
        with httpx.Client(base_url=server.url, timeout=30) as api:
            assert ok(api.get("/api/v1/queues/orders/groups/g"))["lag"] == 0
            assert ok(api.post("/api/v1/queues/orders/groups/g/pull", json={"max_messages": 10}))["messages"] == []
    finally:
        server.stop()
