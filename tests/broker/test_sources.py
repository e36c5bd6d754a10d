"""The read model's Protocols (app/broker/sources.py): a real Broker, and its LaggingGroups, have every
member the views, the history and the resting views read through them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chunkmq.broker import sources
from chunkmq.broker.broker import Broker
from tests.broker.conftest import with_broker


def _members(protocol: type) -> set[str]:
    """The names a Protocol declares, with those of the Protocols it extends."""
    names: set[str] = set()
    for cls in protocol.__mro__:
        if cls.__module__ == sources.__name__:
            names |= {n for n in vars(cls) if not n.startswith("_")}
    return names


def test_a_broker_is_every_source(tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        await broker.declare_queue("q", {})
        for protocol in (sources.StoreSource, sources.QueuesSource, sources.Source):
            members = _members(protocol)
            assert "store" in members
            missing = [n for n in members if not hasattr(broker, n)]
            assert missing == [], f"{protocol.__name__}: {missing}"
        assert broker.queues_by_id[broker.queue("q").id] is broker.queue("q")
        lagging: Any = broker.lagging
        assert _members(sources.Lagging) == {"candidates"}
        assert lagging.candidates() == []  # one queue, no group: nothing lags

    with_broker(tmp_path, work)


def test_the_protocols_name_only_state() -> None:
    # the read model reads state, never an operation: every member of Source is a property, but for
    # the queues' names in order, which the broker keeps sorted for the paged lists
    methods = set()
    for protocol in (sources.StoreSource, sources.QueuesSource, sources.Source):
        for cls in protocol.__mro__:
            if cls.__module__ == sources.__name__:
                for name, member in vars(cls).items():
                    if not name.startswith("_") and not isinstance(member, property):
                        methods.add(name)
    assert methods == {"sorted_queue_names"}
