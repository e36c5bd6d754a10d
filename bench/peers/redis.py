"""redis-server with an append-only file (fsynced every second, or before every reply in the
fsync-before-ack class); Streams are the queue."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from bench.peers.process import ManagedProcess, free_port
from bench.peers.server import Endpoint, Server


class RedisServer(Server):
    kind = "redis"

    def __init__(self, workdir: Path, fsync: str = "interval") -> None:
        super().__init__(workdir, fsync)
        self.port = free_port()

    def _process(self) -> ManagedProcess:
        argv = ["/usr/bin/redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                "--appendonly", "yes", "--appendfsync", self.appendfsync, "--dir", str(self.data_dir),
                "--save", "", "--daemonize", "no", "--protected-mode", "yes"]
        return ManagedProcess(argv, dict(os.environ), self.workdir / "redis.log")

    @property
    def appendfsync(self) -> str:
        # The fsync-before-ack class fsyncs the AOF before replying; otherwise once a second.
        return "always" if self.fsync == "always" else "everysec"

    def _ready(self) -> bool:
        # PING answers -LOADING while the AOF is replayed, so +PONG means the backlog is readable.
        with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")

    def endpoint(self) -> Endpoint:
        return Endpoint(self.kind, self.port)

    def durability(self) -> str:
        return f"appendonly yes, appendfsync {self.appendfsync}"
