"""The idempotent-publish window (producer keys seen recently and the result they received), and its
snapshot on disk, which lets a restart, even after kill -9, rebuild the window without rescanning it.

Keys are scoped to the target of the publish, as Kafka and RabbitMQ streams scope deduplication to a
producer: the window holds `x/<exchange>/<key>` for a publish through an exchange (`x//<key>` for the
default one) and `q/<queue>/<key>` for a publish to a queue, and so does a record's idempotency key
field (its flag FLAG_SCOPED_KEY says so). Names hold no `/`, so the scope ends at the second one.

Snapshot format: a directory of segment files `<data_dir>/dedup/<to>.json`, `<to>` zero-padded to 20
digits so that names sort by position. One segment is one JSON object:

    {"format": 2, "from": <int>, "to": <int>,
     "keys": [str, ...], "timestamps": [int, ...], "results": [str, ...]}

Format 1 (before keys were scoped) has the same fields with bare keys; it is still read: each key
gets the scope of the exchange its message was published through (`rescope`, from the log).

It holds the keys put into the window since the previous segment, oldest first (three columns: no
JSON object per key to build or parse), and `to` is the log's end
position when they were copied: every keyed record below `to` is in this segment or an older one.
Segments are never rewritten: each is written to a temp file, fsynced, renamed, and the directory
fsynced. A segment whose keys have all expired is deleted, except the newest, which carries the
position the next restart scans the log from.

Invariant: the segments on disk plus the log records at or after the newest segment's `to` hold every
key of the window. A restart loads the segments, drops expired keys, and scans only that tail.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import Any

import orjson

from chunkmq.storage.files import create_file, fsync_dir, private_dir

log = logging.getLogger("chunkmq.broker.dedup")

FORMAT = 2
READABLE_FORMATS = (1, 2)
SUFFIX = ".json"
_TMP_SUFFIX = ".tmp"
_key, _timestamp, _result = itemgetter(0), itemgetter(1), itemgetter(2)


def key_scope(kind: str, name: str) -> str:
    """The prefix that scopes a key: kind `x` (an exchange) or `q` (a queue), and the target's name."""
    return f"{kind}/{name}/"


class IdempotencyWindow:
    """Keys are scoped by their caller (`key_scope`). Entries expire `window_ms` after they were stored. Owned by the
    event loop thread (no locks): publish puts and gets, the snapshot task takes the recent puts."""

    def __init__(self, window_ms: int) -> None:
        self.window_ms = window_ms
        self._entries: OrderedDict[str, tuple[int, bytes]] = OrderedDict()
        # Puts not yet in a snapshot segment, in order. A list append per put makes taking them O(1) on
        # the loop; walking the OrderedDict instead costs ~0.3 us a key, a stall at high key rates.
        self._recent: list[tuple[str, int, bytes]] = []

    def get(self, key: str, now_ms: int) -> bytes | None:
        self.expire(now_ms)
        entry = self._entries.get(key)
        return entry[1] if entry is not None else None

    def put(self, key: str, timestamp_ms: int, result: bytes) -> None:
        if self.window_ms <= 0:
            return
        self._entries[key] = (timestamp_ms, result)
        self._entries.move_to_end(key)
        self._recent.append((key, timestamp_ms, result))

    def expire(self, now_ms: int) -> None:
        # Insertion order is timestamp order (the store's clock is monotonic), so expiry pops the front.
        limit = now_ms - self.window_ms
        entries = self._entries
        while entries:
            first = next(iter(entries.values()))
            if first[0] >= limit:
                break
            entries.popitem(last=False)

    def take_recent(self) -> list[tuple[str, int, bytes]]:
        """The puts since the last call, oldest first; the caller writes them or gives them back."""
        recent, self._recent = self._recent, []
        return recent

    def give_back(self, recent: list[tuple[str, int, bytes]]) -> None:
        """Puts taken for a snapshot that failed: the next snapshot writes them."""
        self._recent[:0] = recent

    def load(self, keys: list[str], timestamps: list[int], results: list[bytes], since_ms: int) -> None:
        """Add entries in timestamp order (from a snapshot), skipping those older than since_ms. Not
        recent puts: they are on disk already."""
        if self.window_ms <= 0:
            return
        start = bisect_left(timestamps, since_ms)
        keys = keys[start:]
        fresh = zip(keys, zip(timestamps[start:], results[start:], strict=True), strict=True)
        if not self._entries:  # on start: one C-level build instead of a Python loop per key
            self._entries = OrderedDict(fresh)
            if len(self._entries) == len(keys):
                return
            self._entries.clear()  # a key put twice: it must sit at its later place, as put() leaves it
            fresh = zip(keys, zip(timestamps[start:], results[start:], strict=True), strict=True)
        entries = self._entries
        for key, value in fresh:
            entries[key] = value
            entries.move_to_end(key)

    def __len__(self) -> int:
        return len(self._entries)


@dataclass(slots=True)
class Segment:
    to: int  # log end position when its keys were copied
    newest_ms: int  # timestamp of its newest key; -1 when it holds none
    path: Path


@dataclass(slots=True)
class Loaded:
    """What the segments on disk hold, oldest key first, and where the log scan has to start."""

    position: int
    segments: int
    keys: list[str] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    results: list[bytes] = field(default_factory=list)


class WindowSnapshots:
    """The segment files of one data directory. Thread-safe: `write` runs in a worker thread while the
    event loop goes on, and a final write on shutdown may overlap a periodic one."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._lock = threading.Lock()
        self._segments: list[Segment] = []  # on disk, by position

    @staticmethod
    def file_name(to: int) -> str:
        return f"{to:020d}{SUFFIX}"

    @property
    def position(self) -> int | None:
        """The newest segment's `to`: where a restart would start scanning the log."""
        return self._segments[-1].to if self._segments else None

    def load(self, end_position: int, rescope: Callable[[str, bytes], str | None] | None = None) -> Loaded | None:
        """Read every segment. Those reaching past the log's end describe records a crash of the machine
        took back (the log was fsynced less often than they were): they are deleted, and the scan starts
        from the newest one left. None when nothing usable is on disk: the caller scans the whole window
        (and any unreadable segment is deleted, since it may have held keys). Keys of a format 1 segment
        go through `rescope(key, result)`: the scoped key, or None when it cannot be told (dropped; all
        of them without `rescope`)."""
        with self._lock:
            private_dir(self.directory)
            for stale in self.directory.glob(f"*{_TMP_SUFFIX}"):
                stale.unlink()  # a write interrupted by a crash
            paths = sorted(self.directory.glob(f"*{SUFFIX}"))
            loaded: list[tuple[Segment, dict[str, Any]]] = []
            drop: list[Path] = []
            for path in paths:
                try:
                    body = orjson.loads(path.read_bytes())
                    if body["format"] not in READABLE_FORMATS or path.name != self.file_name(body["to"]):
                        raise ValueError(f"format {body['format']}, to {body['to']}")
                    if not len(body["keys"]) == len(body["timestamps"]) == len(body["results"]):
                        raise ValueError("columns of different lengths")
                except (OSError, ValueError, KeyError, TypeError) as exc:
                    log.warning("unreadable idempotency snapshot %s (%s): scanning the whole window instead",
                                path, exc)
                    self._delete(paths)
                    self._segments = []
                    return None
                if body["to"] > end_position:
                    drop.append(path)
                    continue
                ts = body["timestamps"]
                loaded.append((Segment(body["to"], ts[-1] if ts else -1, path), body))
            if drop:
                log.warning("idempotency snapshots %s reach past the log's end %d; scanning from the one before",
                            [p.name for p in drop], end_position)
                self._delete(drop)
            self._segments = [segment for segment, _ in loaded]
            if not loaded:
                return None
            out = Loaded(position=loaded[-1][0].to, segments=len(loaded))
            for _, body in loaded:
                if body["format"] == 1:
                    _rescope(body, rescope or (lambda key, result: None))
                out.keys += body["keys"]
                out.timestamps += body["timestamps"]
                out.results += map(str.encode, body["results"])
            return out

    def write(self, start: int, to: int, entries: list[tuple[str, int, bytes]], expired_before: int) -> None:
        """Write one segment of (key, timestamp, result) entries durably, then delete the older
        segments whose keys have all expired."""
        timestamps = list(map(_timestamp, entries))
        body = orjson.dumps({
            "format": FORMAT, "from": start, "to": to, "keys": list(map(_key, entries)),
            "timestamps": timestamps, "results": [r.decode() for r in map(_result, entries)],
        })
        with self._lock:
            private_dir(self.directory)
            path = self.directory / self.file_name(to)
            tmp = path.with_suffix(_TMP_SUFFIX)
            with os.fdopen(create_file(tmp, os.O_WRONLY), "wb") as f:
                f.write(body)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            fsync_dir(self.directory)  # the rename is durable before older segments can go
            segments = [s for s in self._segments if s.to != to]
            segments.append(Segment(to, timestamps[-1] if timestamps else -1, path))
            segments.sort(key=lambda s: s.to)
            expired = [s for s in segments[:-1] if s.newest_ms < expired_before]
            if expired:
                self._delete([s.path for s in expired])
            self._segments = [s for s in segments if s not in expired]

    def _delete(self, paths: list[Path]) -> None:
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        fsync_dir(self.directory)


def _rescope(body: dict[str, Any], rescope: Callable[[str, bytes], str | None]) -> None:
    """Scope the bare keys of a format 1 segment in place, dropping those that cannot be scoped."""
    keys, timestamps, results = [], [], []
    for key, ts, result in zip(body["keys"], body["timestamps"], body["results"], strict=True):
        scoped = rescope(key, result.encode())
        if scoped is not None:
            keys.append(scoped)
            timestamps.append(ts)
            results.append(result)
    body["keys"], body["timestamps"], body["results"] = keys, timestamps, results
