"""Property-based tests: the store against a plain in-memory model."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, precondition, rule

from chunkmq.storage import NewMessage, Store, StoreOptions, tag_hash

OPTIONS = StoreOptions(chunk_size=4096, index_chunk_entries=8, checkpoint_interval_ms=3_600_000,
                       max_message_bytes=600, max_batch_bytes=4096, tail_cache_bytes=1024)

message = st.builds(
    lambda data, tag, k: (data, tag, k),
    st.binary(max_size=120),
    st.sampled_from([b"", b"a", b"b"]),
    st.integers(min_value=0, max_value=7),
)


class StoreModel(RuleBasedStateMachine):
    queues = Bundle("queues")

    @initialize()
    def setup(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="chunkmq-prop-"))
        self.name = "s"
        self.store = Store.open(self.dir / self.name, OPTIONS)
        self.model: dict[int, list[tuple[bytes, bytes]]] = {}  # queue -> every message ever appended
        self.first: dict[int, int] = {}

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(target=queues, q=st.integers(min_value=0, max_value=2**32 - 1))
    def create(self, q: int) -> int:
        self.store.create_queue(q)
        self.model.setdefault(q, [])
        self.first.setdefault(q, 0)
        return q

    @precondition(lambda self: self.model)
    @rule(data=st.data(), batch=st.lists(message, min_size=1, max_size=12))
    def append(self, data: st.DataObject, batch: list[tuple[bytes, bytes, int]]) -> None:
        ids = sorted(self.model)
        new = []
        for body, tag, k in batch:
            placed = data.draw(st.lists(st.sampled_from(ids), min_size=1, max_size=3, unique=True))
            new.append(NewMessage(body, placed, tag=tag, flags=k))
        appended = self.store.append(new)
        for m, a in zip(new, appended, strict=True):
            for q, o in a.offsets:
                assert o == len(self.model[q])
                self.model[q].append((m.data, m.tag))

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def read(self, data: st.DataObject) -> None:
        q = data.draw(st.sampled_from(sorted(self.model)))
        start = data.draw(st.integers(min_value=0, max_value=len(self.model[q]) + 2))
        count = data.draw(st.integers(min_value=1, max_value=30))
        got = self.store.read(q, start, count)
        lo = max(start, self.first[q])
        want = self.model[q][lo : lo + count]
        assert [(data, tag) for *_, tag, data in got] == want
        assert [offset for offset, *_ in got] == list(range(lo, lo + len(want)))

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def read_matching(self, data: st.DataObject) -> None:
        q = data.draw(st.sampled_from(sorted(self.model)))
        tag = data.draw(st.sampled_from([b"a", b"b"]))
        got, next_scan = self.store.read_matching(q, 0, 1000, frozenset([tag_hash(tag)]))
        want = [(o, d) for o, (d, t) in enumerate(self.model[q]) if t == tag and o >= self.first[q]]
        assert [(offset, data) for offset, *_, data in got] == want
        assert next_scan == len(self.model[q])

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def set_floor(self, data: st.DataObject) -> None:
        q = data.draw(st.sampled_from(sorted(self.model)))
        floor = data.draw(st.integers(min_value=0, max_value=len(self.model[q]) + 3))
        dropped, _ = self.store.set_first_offset(q, floor)
        new_first = min(max(floor, self.first[q]), len(self.model[q]))
        assert dropped == new_first - self.first[q]
        self.first[q] = new_first

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def retain(self, data: st.DataObject) -> None:
        floors = {q: data.draw(st.integers(min_value=0, max_value=len(self.model[q]))) for q in self.model}
        self.store.retain(floors)
        for q in self.model:
            first = self.store.first_offset(q)
            assert self.first[q] <= first <= max(self.first[q], floors[q])
            self.first[q] = first

    @rule()
    def reopen(self) -> None:
        self.store.close()
        self.store = Store.open(self.dir / self.name, OPTIONS)

    @rule()
    def crash(self) -> None:
        """Open a copy of the files as a crash leaves them (no final flush)."""
        self.crashes = getattr(self, "crashes", 0) + 1
        image = f"crash{self.crashes}"
        shutil.copytree(self.dir / self.name, self.dir / image)
        self.store.close()
        self.store = Store.open(self.dir / image, OPTIONS)
        self.name = image
        for q, first in self.first.items():
            # a floor raised after the last recovery point may come back down: raise it again
            assert self.store.first_offset(q) <= first
            self.store.set_first_offset(q, first)

    @invariant()
    def counters(self) -> None:
        for q, msgs in self.model.items():
            assert self.store.next_offset(q) == len(msgs)
            assert self.store.first_offset(q) == self.first[q]
            entries = self.store.index_entries(q, 0, len(msgs))
            assert self.store.queue_bytes(q) == sum(e.length for e in entries)


TestStoreModel = StoreModel.TestCase
TestStoreModel.settings = settings(max_examples=60, stateful_step_count=40, deadline=None,
                                   suppress_health_check=[HealthCheck.too_slow])
