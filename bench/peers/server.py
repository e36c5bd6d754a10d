"""The server side of a benchmark: start, measure, restart and stop one broker on 127.0.0.1."""

from __future__ import annotations

import base64
import contextlib
import shutil
import tempfile
import urllib.error
import urllib.request
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from bench.peers.process import ManagedProcess, dir_bytes


@dataclass(frozen=True)
class Endpoint:
    """Everything a client process needs to connect; plain data so it crosses process boundaries."""

    kind: str
    port: int
    http_port: int = 0
    extra: dict[str, str] = field(default_factory=dict)


def http_status(url: str, auth: tuple[str, str] | None = None, timeout: float = 2.0) -> int:
    req = urllib.request.Request(url)
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        req.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


class Server(ABC):
    """One broker process with its own temporary data directory and free ports."""

    kind: str = ""
    start_timeout: float = 120.0

    def __init__(self, workdir: Path, fsync: str = "interval") -> None:
        self.workdir = workdir
        self.data_dir = workdir / "data"
        self.fsync = fsync
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.process: ManagedProcess | None = None

    @abstractmethod
    def _process(self) -> ManagedProcess:
        """A not-yet-started process for this server."""

    @abstractmethod
    def _ready(self) -> bool:
        """True once clients can connect and stored data is readable."""

    @abstractmethod
    def endpoint(self) -> Endpoint: ...

    def durability(self) -> str:
        """One line on what an acknowledged publish guarantees, for the report."""
        return ""

    def start(self) -> float:
        """Start and wait until ready; returns the seconds from spawn to ready."""
        self.process = self._process()
        self.process.start()
        try:
            return self.process.wait_ready(self._ready, self.start_timeout, self.kind)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None
        self._after_stop()

    def _after_stop(self) -> None:  # noqa: B027 - optional hook, most servers need nothing
        """Clean up helpers the server left outside its process group (RabbitMQ's epmd)."""

    def restart(self) -> float:
        """Clean stop, then start on the same data and ports; returns seconds from spawn to ready."""
        self.stop()
        return self.start()

    def reset(self) -> float:
        """Stop, wipe the data directory and start empty: W5 measures a fresh server's footprint."""
        self.stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)
        self.data_dir.mkdir(parents=True)
        return self.start()

    def cpu_seconds(self) -> float:
        return self.process.cpu_seconds() if self.process else 0.0

    def rss_bytes(self) -> int:
        return self.process.rss_bytes() if self.process else 0

    def disk_bytes(self) -> int:
        return dir_bytes(self.data_dir)


S = TypeVar("S", bound=Server)


@contextlib.contextmanager
def run_when_up(make: Callable[[Path], S], prefix: str = "bench-", parent: Path | None = None) -> Iterator[S]:
    """A server of its own, in a temporary directory (under `parent`, or the system's), stopped and
    removed afterwards."""
    workdir = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    server = make(workdir)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
