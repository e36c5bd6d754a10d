"""Sampling, downsampling, writing behind and reloading the history (app/broker/history.py), on a real
broker over a real data directory and SQLite file. Samples are taken by hand with explicit times, so
the rates are exact."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import orjson

from chunkmq.broker.base import now_ms
from chunkmq.broker.broker import Broker
from chunkmq.broker.history import GroupPoint, QueuePoint, downsample
from tests.broker.conftest import with_broker


async def publish(broker: Broker, queue: str, n: int) -> None:
    await broker.publish("", [{"body": f"m{i}", "routing_key": queue} for i in range(n)])


async def pull(broker: Broker, queue: str, group: str, n: int) -> list[int]:
    body = orjson.loads(await broker.pull(queue, group, n, 0, "c1"))
    return [m["offset"] for m in body["messages"]]


def db_rows(tmp_path: Path, table: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(tmp_path / "data" / "meta.db") as db:
        rows = db.execute(f"SELECT * FROM {table} ORDER BY id").fetchall()
    db.close()
    return rows


def test_samples_take_values_and_rates_from_real_publishes_pulls_and_acks(tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        await broker.declare_queue("q", {})
        await publish(broker, "q", 10)
        await broker.declare_group("q", "g", {})
        t0 = now_ms()
        await broker.history.sample(t0)
        await publish(broker, "q", 5)
        assert await pull(broker, "q", "g", 6) == [0, 1, 2, 3, 4, 5]
        broker.ack("q", "g", {"offsets": [0, 1, 2, 3]})
        await broker.history.sample(t0 + 2000)

        first, second = broker.history.queue_points("q")
        assert first == QueuePoint(t0, 10, first.bytes, 0.0, 0.0)  # no rate before a second sample
        assert second.messages == 15 and second.bytes > first.bytes > 0
        assert (second.publish_rate, second.deliver_rate) == (2.5, 3.0)  # 5 and 6 messages in 2 s
        g0, g1 = broker.history.group_points("q", "g")
        assert (g0.lag, g0.ack_floor, g0.consumers, g0.ack_rate) == (10, 0, 0, 0.0)
        assert (g1.lag, g1.ack_floor, g1.consumers, g1.ack_rate) == (11, 4, 1, 2.0)
        assert g1.lag_seconds >= 0 and g1.floor_moved_at == t0 + 2000
        assert broker.history.queue_points("q", since=t0 + 1) == [second]
        assert broker.history.queue_points("missing") == [] and broker.history.group_points("q", "x") == []

    with_broker(tmp_path, work)


def test_floor_moved_at_moves_only_when_the_floor_moves(tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        history = broker.history
        await broker.declare_queue("q", {})
        await publish(broker, "q", 5)
        await broker.declare_group("q", "g", {})
        assert history.floor_moved_at("q", "g") is None  # not sampled yet
        t = now_ms()
        await history.sample(t)
        assert history.floor_moved_at("q", "g") == t
        assert await pull(broker, "q", "g", 3) == [0, 1, 2]
        await history.sample(t + 1000)  # delivered, nothing acked: the floor stands
        broker.ack("q", "g", {"offsets": [1, 2]})
        await history.sample(t + 2000)  # acks above the floor: it still stands at 0
        await publish(broker, "q", 3)
        await history.sample(t + 3000)  # more lag, same floor
        assert history.floor_moved_at("q", "g") == t
        assert [p.ack_floor for p in history.group_points("q", "g")] == [0, 0, 0, 0]
        broker.ack("q", "g", {"offsets": [0]})
        await history.sample(t + 4000)
        assert history.floor_moved_at("q", "g") == t + 4000
        assert history.group_points("q", "g")[-1].ack_floor == 3
        await history.sample(t + 5000)
        assert history.floor_moved_at("q", "g") == t + 4000
        assert history.floor_moved_at("q", "nope") is None and history.floor_moved_at("nope", "g") is None

    with_broker(tmp_path, work)


def test_downsample_means_values_and_keeps_the_newest_floor() -> None:
    points = [GroupPoint(1000, 2, 1.0, 4.0, 1, 10, 900), GroupPoint(1500, 4, 3.0, 0.0, 3, 12, 1500),
              GroupPoint(2100, 9, 0.5, 1.0, 2, 12, 1500)]
    # each bucket is stamped with its first point's time, never with a start before its data
    assert downsample(points, 1000) == [GroupPoint(1000, 3.0, 2.0, 2.0, 3, 12, 1500),
                                        GroupPoint(2100, 9.0, 0.5, 1.0, 2, 12, 1500)]
    assert downsample([], 1000) == []


def test_coarse_points_are_written_per_bucket_and_served_from_the_database(tmp_path: Path) -> None:
    async def work(broker: Broker) -> list[QueuePoint]:
        history = broker.history
        await broker.declare_queue("q", {})
        base = now_ms() // 1000 * 1000 - 60_000  # a whole second a minute ago
        for i, t in enumerate(range(base, base + 2000, 250)):  # two coarse buckets of 4 fine points
            if i:
                await publish(broker, "q", i)
            await history.sample(t)
        await history.sample(base + 2000)  # the first sample of the third bucket closes the second
        # 9 fine points; the two buckets' coarse points; and the coarse points of the first and the
        # last bucket written at once, as q was at rest then (the first bucket's end wrote it anew)
        assert await history.flush() == 9 + 2 + 2
        series = await history.queue_series(broker.queue("q"), base, 1.0)
        assert series.step_ms == 1000
        assert [p.t for p in series.points] == [base, base + 1000, base + 2000]  # the last one is partial
        # messages after each sample: 0, 1, 3, 6 | 10, 15, 21, 28 | 28
        assert [p.messages for p in series.points] == [2.5, 18.5, 28.0]
        fine = await history.queue_series(broker.queue("q"), base, None)
        assert fine.step_ms == 250 and len(fine.points) == 9
        wider = await history.queue_series(broker.queue("q"), base, 0.5)  # downsampled from the fine points
        assert wider.step_ms == 500 and [p.messages for p in wider.points] == [0.5, 4.5, 12.5, 24.5, 28.0]
        return series.points

    with_broker(tmp_path, work)
    rows = db_rows(tmp_path, "queue_history")
    assert sorted({row[2] for row in rows}) == [250, 1000]
    assert len([r for r in rows if r[2] == 250]) == 9


def test_history_survives_a_restart_and_so_does_floor_moved_at(tmp_path: Path) -> None:
    t = now_ms() - 30_000

    async def before(broker: Broker) -> None:
        await broker.declare_queue("q", {})
        await publish(broker, "q", 4)
        await broker.declare_group("q", "g", {})
        assert await pull(broker, "q", "g", 2) == [0, 1]
        broker.ack("q", "g", {"up_to": 2})
        await broker.commit_groups()
        await broker.history.sample(t)
        await broker.history.sample(t + 1000)
        # close() writes what is pending

    async def after(broker: Broker) -> None:
        history = broker.history
        series = await history.queue_series(broker.queue("q"), t - 1, None)
        assert [(p.t, p.messages) for p in series.points] == [(t, 4), (t + 1000, 4)]
        groups = await history.group_series(broker.queue("q"), "g", t - 1, None)
        assert [(p.t, p.lag, p.ack_floor) for p in groups.points] == [(t, 2, 2), (t + 1000, 2, 2)]
        await history.sample()
        assert history.floor_moved_at("q", "g") == t  # the floor has not moved since before the restart
        coarse = await history.queue_series(broker.queue("q"), t - 1, 60)
        assert coarse.step_ms == 60_000 and coarse.points[0].messages == 4

    with_broker(tmp_path, before)
    with_broker(tmp_path, after)


def test_deleting_a_queue_or_group_deletes_its_history(tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        history = broker.history
        for name in ("keep", "gone"):
            await broker.declare_queue(name, {})
            await broker.declare_group(name, "g1", {})
            await broker.declare_group(name, "g2", {})
        await history.sample(now_ms() - 1000)
        await history.flush()
        await history.sample()  # pending, not written yet
        await broker.delete_queue("gone", force=False)
        await broker.delete_group("keep", "g2")
        assert history.queue_points("gone") == [] and history.group_points("keep", "g2") == []
        await history.flush()
        # a point sampled before the deletion and written after it must not come back either
        keep = broker.queue("keep")
        history._pending.append((keep.id, "g2", history.step_ms, GroupPoint(now_ms(), 0, 0, 0, 0, 0, 0)))
        await history.flush()
        await broker.declare_queue("gone", {})  # a new queue of the same name starts empty
        await history.sample()
        assert len(history.queue_points("gone")) == 1
        series = await history.queue_series(broker.queue("gone"), 0, 60)
        assert len(series.points) == 1

    with_broker(tmp_path, work)
    queue_ids = {row[1] for row in db_rows(tmp_path, "queue_history")}
    groups = {(row[1], row[2]) for row in db_rows(tmp_path, "group_history")}
    assert len(queue_ids) == 2  # "keep" and the new "gone"; the old "gone" has no rows left
    assert {g for _, g in groups} == {"g1"}


def test_old_points_are_pruned_but_a_series_keeps_the_point_it_holds(tmp_path: Path) -> None:
    async def work(broker: Broker) -> dict[str, list[Any]]:
        history = broker.history
        await broker.declare_queue("q", {})  # changes before every sample
        await broker.declare_queue("rest", {})  # never changes: one point of each resolution
        now = now_ms()
        times = [now - history.coarse_keep_ms - 5000,  # older than everything is kept
                 now - history.fine_keep_ms - 5000,  # fine: too old; its coarse bucket stays
                 now - 1000]
        for t in times:
            await publish(broker, "q", 1)
            await history.sample(t)
        await history.close()
        fine = {name: await history.queue_series(broker.queue(name), None, None) for name in ("q", "rest")}
        coarse = {name: await history.queue_series(broker.queue(name), 0, 1.0) for name in ("q", "rest")}
        assert [(p.t, p.messages) for p in fine["q"].points] == [(times[2], 3)]  # the last hour
        assert [(p.t, p.messages) for p in fine["rest"].points] == [(times[2], 0)]
        assert [(p.t, p.messages) for p in coarse["q"].points] == [(times[1], 2), (times[2], 3)]
        assert [(p.t, p.messages) for p in coarse["rest"].points] == [(times[1], 0), (times[2], 0)]
        return [broker.queue("q").id, broker.queue("rest").id, *times]

    q, rest, *times = with_broker(tmp_path, work)
    rows = db_rows(tmp_path, "queue_history")
    # q: the fine point of the middle sample is the newest before the fine cut and stays, the first
    # goes; its first coarse point is the newest before the coarse cut and stays too
    # (q's rates round to 0 over these long gaps: at rest at each sample, so each bucket's coarse
    # point is written at once)
    assert [(r[2], r[3]) for r in rows if r[1] == q] == [(1000, times[0]), (250, times[1]), (1000, times[1]),
                                                          (250, times[2]), (1000, times[2])]
    assert [(r[2], r[3]) for r in rows if r[1] == rest] == [(250, times[0]), (1000, times[0])]


def test_a_sample_of_many_queues_yields_and_drops_a_queue_deleted_meanwhile(tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        history = broker.history
        for i in range(250):
            await broker.declare_queue(f"q{i}", {})
        sampling = asyncio.create_task(history.sample())
        await asyncio.sleep(0)  # the sample runs up to its first yield, after 50 queues
        assert not sampling.done()
        await broker.delete_queue("q150", force=False)
        await broker.delete_queue("q20", force=False)  # sampled already
        await sampling
        assert history.queue_points("q150") == [] and history.queue_points("q20") == []
        assert all(len(history.queue_points(f"q{i}")) == 1 for i in range(250) if i not in (20, 150))
        assert len(history._queues) == 248

    with_broker(tmp_path, work)


def test_a_sample_takes_views_only_of_queues_that_changed_and_gives_what_views_give(tmp_path: Path,
                                                                                    monkeypatch: Any) -> None:
    from chunkmq.broker import history as history_module
    from chunkmq.broker import views

    async def work(broker: Broker) -> None:
        for name in ("idle", "busy", "lagging", "consumed"):
            await broker.declare_queue(name, {})
            await broker.declare_group(name, "g", {})
        await publish(broker, "lagging", 2)  # its group's lag_seconds grows: a view at every sample
        await publish(broker, "consumed", 2)
        await pull(broker, "consumed", "g", 2)
        broker.ack("consumed", "g", {"up_to": 2})
        viewed: list[str] = []
        view = views.queue_view

        def spy(b: Any, queue: Any, now: int | None = None) -> Any:
            viewed.append(queue.name)
            return view(b, queue, now)

        monkeypatch.setattr(views, "queue_view", spy)  # what a sample calls
        t0 = now_ms()
        history = broker.history
        for step in range(4):
            viewed.clear()
            if step == 2:
                await publish(broker, "busy", 3)
            await history.sample(t0 + step * 1000)
            if step == 0:
                assert sorted(viewed) == ["busy", "consumed", "idle", "lagging"]  # the first sample: all
            else:  # consumed has a consumer seen lately, lagging a lag: a view each; busy at step 2 and
                # once more at step 3, since its previous point had a rate; idle never again
                assert sorted(viewed) == (["busy"] if step >= 2 else []) + ["consumed", "lagging"]
        # what was repeated is what a view of every queue at every sample gives (what the full round did)
        full = history_module.History(broker)
        monkeypatch.setattr(broker.store, "changed_queues", lambda reader: set(broker.store.queue_ids()))
        for step in range(4):
            await full.sample(t0 + step * 1000)
        for name in ("idle", "busy"):
            assert [p[1:] for p in history.queue_points(name)][-1] == [p[1:] for p in full.queue_points(name)][-1]
            assert [p.t for p in history.queue_points(name)] == [t0 + i * 1000 for i in range(4)]
        assert history.queue_points("idle") == full.queue_points("idle")
        assert history.group_points("idle", "g") == full.group_points("idle", "g")

    with_broker(tmp_path, work)


def test_a_resting_queue_writes_no_rows_and_its_series_reads_the_same(tmp_path: Path) -> None:
    base = now_ms() // 1000 * 1000 - 60_000  # a whole second a minute ago
    times = [base + i * 250 for i in range(12)]  # three coarse buckets of four samples

    async def before(broker: Broker) -> list[int]:
        history = broker.history
        for name in ("idle", "busy"):
            await broker.declare_queue(name, {})
            await broker.declare_group(name, "g", {})
        await publish(broker, "idle", 2)
        assert await pull(broker, "idle", "g", 2) == [0, 1]
        broker.ack("idle", "g", {"up_to": 2})
        broker.queue("idle").groups["g"].consumers.clear()  # consumed long ago: nothing left to show
        for t in times:
            await publish(broker, "busy", 1)
            await history.sample(t)
        idle = broker.queue("idle")
        assert idle.id not in history._active  # settled: the samples pass it by
        # in memory, its points are there at every sample all the same
        assert [p.t for p in history.queue_points("idle")] == times
        assert {p[1:] for p in history.queue_points("idle")} == {(2, history.queue_points("idle")[0].bytes, 0.0, 0.0)}
        assert [p.t for p in history.group_points("idle", "g")] == times
        assert [p.messages for p in history.queue_points("busy")] == list(range(1, 13))
        return [idle.id, broker.queue("busy").id]

    async def after(broker: Broker) -> None:  # restarted: everything is read from the database
        history = broker.history
        idle, busy = broker.queue("idle"), broker.queue("busy")
        points = (await history.queue_series(idle, base - 1, None)).points
        assert [p.t for p in points] == times and {p[1:] for p in points} == {points[0][1:]}
        assert points[0].messages == 2 and points[0].publish_rate == 0.0
        groups = (await history.group_series(idle, "g", base - 1, None)).points
        assert [(p.t, p.lag, p.ack_floor, p.consumers) for p in groups] == [(t, 0, 2, 0) for t in times]
        assert [p.messages for p in (await history.queue_series(busy, base - 1, None)).points] == list(range(1, 13))
        coarse = (await history.queue_series(idle, base - 1, 1.0)).points
        assert [(p.t, p.messages) for p in coarse] == [(base, 2), (base + 1000, 2), (base + 2000, 2)]
        busy_coarse = (await history.queue_series(busy, base - 1, 1.0)).points
        assert [(p.t, p.messages) for p in busy_coarse] == [(base, 2.5), (base + 1000, 6.5), (base + 2000, 10.5)]
        totals = await history.stored_totals(base - 1, base + 3000)
        assert [(p.t, p.messages) for p in totals] == [(t, 2 + i + 1) for i, t in enumerate(times)]

    idle_id, busy_id = with_broker(tmp_path, before)
    rows = db_rows(tmp_path, "queue_history")
    assert [(r[2], r[3]) for r in rows if r[1] == idle_id] == [(250, base), (1000, base)]  # one of each
    assert len([r for r in rows if r[1] == busy_id and r[2] == 250]) == 12
    assert [(r[3], r[4]) for r in db_rows(tmp_path, "group_history") if r[1] == idle_id] == [(250, base), (1000, base)]
    with_broker(tmp_path, after)


def test_a_settled_queue_is_sampled_again_when_a_consumer_comes_back(tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        history = broker.history
        await broker.declare_queue("q", {})
        await broker.declare_group("q", "g", {})
        t0 = now_ms()
        await history.sample(t0)
        assert broker.queue("q").id not in history._active  # at rest from the first sample
        assert await pull(broker, "q", "g", 1) == []  # an empty pull: no delivery state changes
        await history.sample(t0 + 250)
        assert [p.consumers for p in history.group_points("q", "g")] == [0, 1]
        assert broker.queue("q").id in history._active  # a consumer seen lately: sampled every time

    with_broker(tmp_path, work)
