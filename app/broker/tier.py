"""Tiered storage on an open store: every sealed chunk file is uploaded to the bucket, verified, and
recorded in the manifest (docs/storage.md "Tiered storage").

One round (`upload_round`, in a worker thread: the app runs one at a time, `round`) looks at the
store's sealed chunk files and the manifest and makes them agree:

- a sealed file whose object is not verified in the bucket (no row, a row in state local or
  uploading, or a row naming another object: the collector rewrote the file) is uploaded: its row
  goes to `uploading` with the object's key first (a crash then leaves a known key, uploaded again
  by the next round), then to `uploaded` once the bucket holds the object with the right size and
  MD5; the object a rewrite replaced, and the rows of the numbers a merge absorbed, go after that;
- a row whose chunk no longer exists locally (retention deleted it: no queue needs it) goes, with
  its object.

A failed round (the bucket unreachable, refusing, slow) is retried with a doubling delay up to
RETRY_MAX_SECONDS; publishing goes on locally, and `lag_bytes` says what is not in the bucket yet.
Nothing here deletes a local chunk.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from chunkmq.storage.tier import Bucket, TierError, TierLocation, chunk_object, object_key

if TYPE_CHECKING:
    from chunkmq.config import Settings
    from chunkmq.meta.repository import MetaStore
    from chunkmq.meta.tier import TierChunkRow, TierManifest
    from chunkmq.storage import Store
    from chunkmq.storage.chunk import Chunk

log = logging.getLogger("chunkmq.tier")

ROUND_SECONDS = 1.0  # how often the app starts a round (app/main.py)
RETRY_MIN_SECONDS = 1.0
RETRY_MAX_SECONDS = 60.0


def location(settings: Settings) -> TierLocation | None:
    """CHUNKMQ_TIER_URL and the AWS_* settings, parsed; None without a tier."""
    if not settings.tier_url:
        return None
    return TierLocation.parse(settings.tier_url, settings.tier_endpoint, settings.tier_access_key_id,
                              settings.tier_secret_access_key.get_secret_value(), settings.tier_region)


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """The manifest against the bucket (`chunkmq tier verify`)."""

    rows: int  # manifest rows whose object should be in the bucket (uploaded or evicted)
    objects: int  # objects under the prefix's log/
    missing: list[str]  # keys such a row names that the bucket lacks, or holds at another size
    extra: list[str]  # objects no row names: orphans (an upload cut short, a replaced object not yet deleted)
    swept: list[str]  # the extra objects deleted (`sweep`)


def verify(manifest: TierManifest, bucket: Bucket, sweep: bool = False) -> VerifyReport:
    """Compare the manifest with the bucket; with `sweep`, delete the objects no row names. Safe
    while a broker runs: a row names its object before the upload begins."""
    from chunkmq.meta.tier import EVICTED, UPLOADED

    rows = manifest.rows()
    objects = bucket.list()
    named = {r.object_key for r in rows.values()}
    held = [r for r in rows.values() if r.state in (UPLOADED, EVICTED)]
    missing = [r.object_key for r in held if objects.get(r.object_key) != r.size]
    extra = sorted(set(objects) - named)
    swept = []
    if sweep:
        for key in extra:
            bucket.delete(key)
            swept.append(key)
    return VerifyReport(len(held), len(objects), missing, extra, swept)


def restore_if_empty(settings: Settings, queue_ids: list[int]) -> int:
    """Before the store opens: when its log directory holds no chunk (a new or lost disk) and the
    manifest has chunks in the bucket, download them all into it and give every queue an index
    directory, so that recovery replays the whole log into the queues' indexes (offsets and ids as
    they were). Returns the chunks restored. The chunks never uploaded are lost with the disk."""
    from chunkmq.meta.repository import MetaStore
    from chunkmq.meta.tier import EVICTED, UPLOADED, TierManifest
    from chunkmq.storage import files
    from chunkmq.storage.tier import REMOTE_SUFFIX, restore_file

    loc = location(settings)
    root = settings.data_dir / "store"
    log_dir = files.log_dir(root)
    if loc is None or (log_dir.exists() and any(p.suffix == ".chunk" or p.name.endswith(REMOTE_SUFFIX)
                                                for p in log_dir.iterdir())):
        return 0
    with MetaStore(settings.meta_url) as meta:
        rows = [r for r in TierManifest(meta).rows().values() if r.state in (UPLOADED, EVICTED)]
    if not rows:
        return 0
    log.warning("tier: the data directory has no chunks: restoring %d from %s", len(rows), loc.url)
    for directory in (root, log_dir, files.queues_dir(root)):
        files.private_dir(directory)
    bucket = Bucket(loc)
    for r in rows:
        restore_file(bucket.fetch(r.object_key, r.size), files.chunk_path(root, r.number), settings.chunk_size)
    for q in queue_ids:
        files.private_dir(files.queue_dir(root, q))
    files.fsync_dir(log_dir)
    return len(rows)


class Tier:
    def __init__(self, store: Store, bucket: Bucket, manifest: TierManifest, local_bytes: int = 0) -> None:
        self.store = store
        self.bucket = bucket
        self.manifest = manifest
        self.local_bytes = local_bytes  # CHUNKMQ_TIER_LOCAL_BYTES; 0: nothing is evicted
        store.fetcher = self._fetch
        self.fetched = 0  # chunks fetched back from the bucket since start
        self.evicted = 0  # chunks evicted since start
        self.lag_bytes = 0  # bytes of sealed local chunk files not verified in the bucket
        self.bucket_bytes = 0  # bytes of the objects the manifest holds
        self.uploaded_total = 0  # bytes uploaded since start (a counter)
        self.failures = 0  # failed rounds in a row
        self.last_error = ""
        self._retry_at = 0.0
        self._lock = threading.Lock()  # one round at a time, whoever calls

    @classmethod
    def open(cls, settings: Settings, store: Store, meta: MetaStore) -> Tier | None:
        """The tier of the settings, its bucket created if missing and proved writable (TierError
        otherwise); None without CHUNKMQ_TIER_URL."""
        from chunkmq.meta.tier import TierManifest

        loc = location(settings)
        if loc is None:
            return None
        bucket = Bucket(loc)
        bucket.ensure()
        tier = cls(store, bucket, TierManifest(meta), settings.tier_local_bytes)
        tier.adopt()
        tier.measure()
        return tier

    def adopt(self) -> None:
        """Make the store know every chunk the manifest has in the bucket that the data directory
        has neither as a file nor as a stub (lost with a disk, or the crash of an eviction), so
        that it is read from the bucket instead of counted as gone."""
        from chunkmq.meta.tier import EVICTED, UPLOADED
        from chunkmq.storage.tier import RemoteChunk

        chunks, remote = self.store.chunk_map, self.store.remote
        for r in self.manifest.rows().values():
            lost = r.state in (UPLOADED, EVICTED) and r.number not in chunks and r.number not in remote
            if lost and self.store.add_remote(RemoteChunk(r.number, r.last, r.object_key, r.size)):
                log.warning("tier: chunk %d is in the bucket only (%s): it is read from there", r.number,
                                r.object_key)

    async def round(self) -> None:
        """One upload round off the event loop (the app's background job)."""
        import asyncio

        await asyncio.to_thread(self.upload_round)

    def _fetch(self, key: str, size: int) -> bytes:
        """The store's fetcher: a whole object, with the bucket's current credentials."""
        data = self.bucket.fetch(key, size)
        self.fetched += 1
        return data

    def _sealed(self) -> list[Chunk]:
        active = self.store.active_chunk
        return [c for c in self.store.chunk_files() if c.sealed and c is not active and not c.closed]

    def measure(self, rows: dict[int, TierChunkRow] | None = None) -> None:
        """Recompute lag_bytes and bucket_bytes from the store and the manifest."""
        from chunkmq.meta.tier import EVICTED, UPLOADED

        rows = self.manifest.rows() if rows is None else rows
        lag = 0
        for c in self._sealed():
            row = rows.get(c.number)
            try:
                done = row is not None and row.state in (UPLOADED, EVICTED) and row.object_key == object_key(c)
            except ValueError:  # closed by retention meanwhile
                continue
            if not done:
                lag += c.file_bytes
        self.lag_bytes = lag
        self.bucket_bytes = sum(r.size for r in rows.values() if r.state in (UPLOADED, EVICTED))

    def upload_round(self, force: bool = False) -> int:
        """Upload what is not in the bucket yet and drop what retention deleted; returns the bytes
        uploaded. After a failure, does nothing until the retry delay has passed (unless `force`)."""
        with self._lock:
            if not force and time.monotonic() < self._retry_at:
                return 0
            try:
                sent = self._round()
            except TierError as exc:
                self.failures += 1
                self.last_error = str(exc)
                delay = min(RETRY_MAX_SECONDS, RETRY_MIN_SECONDS * 2 ** (self.failures - 1))
                self._retry_at = time.monotonic() + delay
                log.warning("tier upload failed (attempt %d, next in %.0f s): %s", self.failures, delay, exc)
                self.measure()
                return 0
            if self.failures:
                log.info("tier uploads resumed after %d failed attempts", self.failures)
            self.failures, self.last_error, self._retry_at = 0, "", 0.0
            return sent

    def _round(self) -> int:
        from chunkmq.meta.tier import EVICTED, UPLOADED, UPLOADING

        rows = self.manifest.rows()
        sent = 0
        for c in self._sealed():
            try:
                key = object_key(c)
                row = rows.get(c.number)
                if row is not None and row.object_key == key and row.state in (UPLOADED, EVICTED):
                    continue
                body = chunk_object(c)
            except ValueError:  # closed by retention meanwhile: nothing to upload
                continue
            rows[c.number] = self.manifest.put(c.number, c.last, key, len(body), "", UPLOADING)
            up = self.bucket.put_verified(key, body)
            del body
            rows[c.number] = self.manifest.put(c.number, c.last, key, up.size, up.md5, UPLOADED)
            sent += up.size
            self.uploaded_total += up.size
            if row is not None and row.object_key != key:  # the rewrite's new object replaces it
                self.bucket.delete(row.object_key)
            absorbed = [rows.pop(n) for n in range(c.number + 1, c.last + 1) if n in rows]
            for r in absorbed:  # numbers a merge took in: their files are gone, their records are in this one
                self.bucket.delete(r.object_key)
            self.manifest.remove(r.number for r in absorbed)
        chunks, remote = self.store.chunk_map, self.store.remote
        for r in [r for r in rows.values() if r.state == EVICTED and r.number in chunks]:  # fetched back
            rows[r.number] = self.manifest.put(r.number, r.last, r.object_key, r.size, r.md5, UPLOADED)
        dropped = {r.number for r in self.store.take_dropped_remote()}
        gone = [r for r in rows.values() if (r.state != EVICTED and r.number not in chunks and r.number not in remote)
                or (r.number in dropped and r.number not in chunks)]
        for r in gone:  # retention deleted the chunk: no queue needs it any more
            self.bucket.delete(r.object_key)
            del rows[r.number]
        self.manifest.remove(r.number for r in gone)
        self._evict(rows)
        self.measure(rows)
        return sent

    def _evict(self, rows: dict[int, TierChunkRow]) -> None:
        """Past local_bytes of chunks already in the bucket, the oldest leave the local disk: those
        never fetched back by number, then the fetched ones by when they were fetched. The row says
        `evicted` before the file goes, so no crash leaves a file gone that the manifest calls local."""
        from chunkmq.meta.tier import EVICTED, UPLOADED

        if not self.local_bytes:
            return
        held = []
        for c in self._sealed():
            row = rows.get(c.number)
            try:
                if row is not None and row.state == UPLOADED and row.object_key == object_key(c):
                    held.append(c)
            except ValueError:  # closed by retention meanwhile
                continue
        total = sum(c.file_bytes for c in held)
        for c in sorted(held, key=lambda c: (c.fetched_at, c.number)):
            if total <= self.local_bytes:
                break
            row = rows[c.number]
            rows[c.number] = self.manifest.put(row.number, row.last, row.object_key, row.size, row.md5, EVICTED)
            try:
                total -= self.store.evict(c.number, row.object_key, row.size)
            except Exception:
                rows[c.number] = self.manifest.put(row.number, row.last, row.object_key, row.size, row.md5, UPLOADED)
                raise
            self.evicted += 1
