"""The bucket side of tiered storage: sealed chunks as objects in S3-compatible storage.

An object holds one sealed chunk file in compact form: the file's header and data region up to the
end of what the chunk holds (its records, and a rewritten chunk's moved table), then its footer::

    object = file[0 : 64 + extent] + file[64 + data_size : 64 + data_size + 64]

so a byte of the data region is at the same offset in the object as in the file (ranged reads need
no table), and `restore_file` turns an object back into a chunk file that Chunk.open reads. The key
names the chunk's numbers and its seal time: a rewritten chunk (same first number, a later seal)
gets a new key, so the object a manifest row names is never overwritten (readers never see half a
rewrite).

Uploads are verified: the object's size, and its ETag against the MD5 of the bytes sent (a single
PUT: S3's ETag is then the MD5 of the object). The S3 client is obstore (docs/decisions.md, "Tiered
storage"); creating a missing bucket is one SigV4-signed request, which obstore does not offer.

Thread-safety: a Bucket may be used from several threads; nothing here runs on an event loop.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from .chunk import FOOTER, FOOTER_SIZE, HEADER_SIZE, Chunk
from .errors import StorageError, TierError

if TYPE_CHECKING:
    from obstore.store import S3Store

COPY_STEP = 4 << 20
FETCH_STEP = 8 << 20  # bytes per ranged GET when a chunk is fetched back
PROBE = ".chunkmq-probe"  # written and deleted at start: proves the credentials may write


@dataclass(frozen=True, slots=True)
class TierLocation:
    """Where the tier lives: CHUNKMQ_TIER_URL parsed, and how to reach it."""

    url: str  # s3://bucket/prefix, as configured
    bucket: str
    prefix: str  # without leading or trailing slash; may be empty
    endpoint: str  # http(s)://host[:port]; empty: AWS's endpoint for the region
    access_key_id: str
    secret_access_key: str
    region: str

    @classmethod
    def parse(cls, url: str, endpoint: str = "", access_key_id: str = "", secret_access_key: str = "",
              region: str = "us-east-1") -> TierLocation:
        parts = urlsplit(url)
        if parts.scheme != "s3" or not parts.netloc or parts.query or parts.fragment:
            raise ValueError(f"CHUNKMQ_TIER_URL must look like s3://bucket/prefix, not {url!r}")
        return cls(url, parts.netloc, parts.path.strip("/"), endpoint.rstrip("/"), access_key_id,
                   secret_access_key, region or "us-east-1")

    @property
    def http_endpoint(self) -> str:
        return self.endpoint or f"https://s3.{self.region}.amazonaws.com"


@dataclass(frozen=True, slots=True)
class Uploaded:
    """A verified object: its key (below the prefix), size and MD5 (hex)."""

    key: str
    size: int
    md5: str


def object_key(c: Chunk) -> str:
    """The key of a sealed chunk's object: its first and last numbers and its seal time, so that ls
    sorts by number and a rewrite of the same numbers gets a key of its own."""
    sealed_ms = FOOTER.unpack_from(c.mm, HEADER_SIZE + c.data_size)[5]
    return f"log/{c.number:020d}-{c.last:020d}-{sealed_ms}.chunk"


def chunk_object(c: Chunk) -> bytearray:
    """The compact object of a sealed chunk (module docstring). ValueError if it was closed."""
    if not c.sealed:
        raise StorageError(f"chunk {c.number} is not sealed")
    head = c.file_bytes - FOOTER_SIZE  # header and extent
    footer = HEADER_SIZE + c.data_size
    mm = c.mm
    out = bytearray(head + FOOTER_SIZE)
    # copied a few MiB at a time, never through a memoryview of the mmap (retention may close it):
    # each step holds the GIL for a moment only, whatever the chunk size
    for start in range(0, head, COPY_STEP):
        end = min(head, start + COPY_STEP)
        out[start:end] = mm[start:end]
    out[head:] = mm[footer : footer + FOOTER_SIZE]
    return out


def restore_file(data: bytes, path: Path, data_size: int) -> None:
    """Write a chunk object back as a complete chunk file at `path` (sparse where the chunk holds
    nothing), through a temporary name, fsynced."""
    if len(data) < HEADER_SIZE + FOOTER_SIZE:
        raise StorageError(f"{path.name}: a chunk object of {len(data)} bytes is too short")
    tmp = path.with_name(path.name + ".fetch")
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        body = memoryview(data)
        os.pwrite(fd, body[: len(data) - FOOTER_SIZE], 0)
        os.pwrite(fd, body[len(data) - FOOTER_SIZE :], HEADER_SIZE + data_size)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, path)


REMOTE_SUFFIX = ".remote"  # beside where the chunk file was: the stub of a chunk in the bucket only


@dataclass(frozen=True, slots=True)
class RemoteChunk:
    """A sealed chunk file evicted from the local disk: its numbers, object key and object size.
    Kept in a stub file (`stub_path`) so that a restart knows the chunk without the metadata."""

    number: int
    last: int
    key: str
    size: int


def stub_path(chunk_path: Path) -> Path:
    return chunk_path.with_name(chunk_path.name + REMOTE_SUFFIX)


def write_stub(chunk_path: Path, r: RemoteChunk) -> None:
    """Write (fsynced, through a temporary name) the stub of an evicted chunk."""
    path = stub_path(chunk_path)
    tmp = path.with_name(path.name + ".tmp")
    body = json.dumps({"number": r.number, "last": r.last, "key": r.key, "size": r.size}).encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, body)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, path)


def load_stubs(log_dir: Path) -> dict[int, RemoteChunk]:
    """Every evicted chunk of a store's log directory, by each number it stands for. A stub beside
    a chunk file of the same number (a crash between a fetch and the stub's removal) is removed."""
    out: dict[int, RemoteChunk] = {}
    for path in sorted(log_dir.glob("*" + REMOTE_SUFFIX)):
        chunk = path.with_name(path.name.removesuffix(REMOTE_SUFFIX))
        if chunk.exists():
            path.unlink()
            continue
        raw = json.loads(path.read_bytes())
        r = RemoteChunk(int(raw["number"]), int(raw["last"]), str(raw["key"]), int(raw["size"]))
        for n in range(r.number, r.last + 1):
            out[n] = r
    return out


def _sign(loc: TierLocation, method: str, path: str, body: bytes) -> dict[str, str]:
    """SigV4 headers for one path-style request to the endpoint (used for CreateBucket only)."""
    import hmac
    now = datetime.now(UTC)
    stamp, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    host = urlsplit(loc.http_endpoint).netloc
    payload = hashlib.sha256(body).hexdigest()
    signed = "host;x-amz-content-sha256;x-amz-date"
    headers = f"host:{host}\nx-amz-content-sha256:{payload}\nx-amz-date:{stamp}\n"
    canonical = f"{method}\n{path}\n\n{headers}\n{signed}\n{payload}"
    scope = f"{day}/{loc.region}/s3/aws4_request"
    to_sign = f"AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
    key = f"AWS4{loc.secret_access_key}".encode()
    for part in (day, loc.region, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    return {"x-amz-date": stamp, "x-amz-content-sha256": payload,
            "Authorization": f"AWS4-HMAC-SHA256 Credential={loc.access_key_id}/{scope}, "
                             f"SignedHeaders={signed}, Signature={signature}"}


def _reason(exc: BaseException) -> str:
    """What an obstore error says in a few words (they run to a dozen lines of context): the HTTP
    status and S3's error code when there are some, else the first line."""
    text = str(exc)
    status = re.search(r"status code: (\d{3} [A-Za-z ]+)", text)
    code = re.search(r"<Code>([^<]+)</Code>", text)
    if status:
        return f"HTTP {status.group(1).strip()}" + (f" ({code.group(1)})" if code else "")
    first = text.strip().splitlines()
    return first[0][:300] if first else type(exc).__name__


class Bucket:
    """The objects of one tier location. Keys given and returned are below the prefix."""

    def __init__(self, loc: TierLocation) -> None:
        from obstore.store import S3Store  # loaded only when a tier is configured

        self.loc = loc
        options: dict[str, Any] = {"region": loc.region}
        if loc.endpoint:
            options["endpoint"] = loc.endpoint
            options["virtual_hosted_style_request"] = False
        if loc.access_key_id:
            options["access_key_id"] = loc.access_key_id
            options["secret_access_key"] = loc.secret_access_key
        # A few retries within 30 s, not obstore's 10 within 3 minutes: the tier's own rounds retry
        # with backoff, and a bucket that is down shows in the tier lag sooner.
        self.store: S3Store = S3Store(
            loc.bucket, prefix=loc.prefix or None, client_options={"allow_http": loc.endpoint.startswith("http:")},
            retry_config={"max_retries": 3, "retry_timeout": timedelta(seconds=30)}, **options)

    def ensure(self) -> None:
        """Create the bucket if it is missing and prove the credentials may write and delete in it;
        TierError naming the URL and what was refused otherwise."""
        import obstore

        # obstore raises the built-in FileNotFoundError for a 404 (its NotFoundError for some others)
        from obstore.exceptions import NotFoundError as _NotFound

        NotFoundError = (FileNotFoundError, _NotFound)

        try:
            obstore.put(self.store, PROBE, b"probe", use_multipart=False)
        except NotFoundError:
            self._create_bucket()
            # a gateway may remember "no such bucket" for a moment (SeaweedFS: about 0.2 s)
            deadline = time.monotonic() + 10
            while True:
                try:
                    obstore.put(self.store, PROBE, b"probe", use_multipart=False)
                    break
                except NotFoundError as exc:
                    if time.monotonic() > deadline:
                        raise TierError(f"{self.loc.url}: writing an object was refused: {_reason(exc)}") from None
                    time.sleep(0.1)
                except Exception as exc:
                    raise TierError(f"{self.loc.url}: writing an object was refused: {_reason(exc)}") from None
        except Exception as exc:
            raise TierError(f"{self.loc.url}: writing an object was refused: {_reason(exc)}") from None
        try:
            obstore.delete(self.store, PROBE)
        except Exception as exc:
            raise TierError(f"{self.loc.url}: deleting an object was refused: {_reason(exc)}") from None

    def _create_bucket(self) -> None:
        import urllib.error  # here: a store without a tier never loads urllib's HTTP client
        import urllib.request

        loc = self.loc
        body = b"" if loc.region == "us-east-1" else (
            "<CreateBucketConfiguration><LocationConstraint>"
            f"{loc.region}</LocationConstraint></CreateBucketConfiguration>").encode()
        path = f"/{loc.bucket}"
        request = urllib.request.Request(loc.http_endpoint + path, data=body, method="PUT",
                                         headers=_sign(loc, "PUT", path, body))
        try:
            with urllib.request.urlopen(request, timeout=30):
                pass
        except urllib.error.HTTPError as exc:
            detail = exc.read(400).decode(errors="replace")
            code = detail.split("<Code>")[1].split("</Code>")[0] if "<Code>" in detail else exc.reason
            raise TierError(f"{loc.url}: creating the bucket was refused: HTTP {exc.code} {code}") from None
        except OSError as exc:
            raise TierError(f"{loc.url}: the endpoint {loc.http_endpoint} cannot be reached: {exc}") from None

    def put_verified(self, key: str, data: bytes | bytearray) -> Uploaded:
        """Upload one object in a single PUT and check what the bucket holds: the size, and the
        ETag against the MD5 of `data`. TierError when they differ or the bucket fails."""
        import obstore

        md5 = hashlib.md5(data, usedforsecurity=False).hexdigest()
        try:
            put = obstore.put(self.store, key, data, use_multipart=False)
            meta = obstore.head(self.store, key)
        except Exception as exc:
            raise TierError(f"{self.loc.url}: uploading {key} failed: {_reason(exc)}") from None
        etag = (meta.get("e_tag") or put.get("e_tag") or "").strip('"')
        if meta["size"] != len(data) or etag != md5:
            raise TierError(f"{self.loc.url}: {key} reads back as {meta['size']} bytes, ETag {etag!r}; "
                            f"sent {len(data)} bytes, MD5 {md5}")
        return Uploaded(key, len(data), md5)

    def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes [start, end) of an object."""
        import obstore

        try:
            return bytes(obstore.get_range(self.store, key, start=start, end=end))
        except Exception as exc:
            raise TierError(f"{self.loc.url}: reading {key} [{start}, {end}) failed: {_reason(exc)}") from None

    def get(self, key: str) -> bytes:
        import obstore

        try:
            return bytes(obstore.get(self.store, key).bytes())
        except Exception as exc:
            raise TierError(f"{self.loc.url}: reading {key} failed: {_reason(exc)}") from None

    def fetch(self, key: str, size: int) -> bytes:
        """A whole object of `size` bytes, in ranged GETs of FETCH_STEP bytes (a part that fails is
        one retry, not the whole object)."""
        out = bytearray(size)
        for start in range(0, size, FETCH_STEP):
            end = min(size, start + FETCH_STEP)
            try:
                part = self.get_range(key, start, end)
            except TierError:
                part = self.get_range(key, start, end)
            if len(part) != end - start:
                raise TierError(f"{self.loc.url}: {key} [{start}, {end}) read back {len(part)} bytes")
            out[start:end] = part
        return bytes(out)

    def delete(self, key: str) -> None:
        """Delete an object; one that is already gone is no error."""
        import obstore

        try:
            obstore.delete(self.store, key)
        except Exception as exc:
            raise TierError(f"{self.loc.url}: deleting {key} failed: {_reason(exc)}") from None

    def list(self, under: str = "log/") -> dict[str, int]:
        """Every object below `under` (a folder of keys): key -> size."""
        import obstore

        try:
            return {m["path"]: m["size"] for batch in obstore.list(self.store, prefix=under) for m in batch}
        except Exception as exc:
            raise TierError(f"{self.loc.url}: listing {under} failed: {_reason(exc)}") from None
