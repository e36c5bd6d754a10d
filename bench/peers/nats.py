"""nats-server with JetStream file storage in a temporary directory."""

from __future__ import annotations

import os
from pathlib import Path

from bench.peers.process import ManagedProcess, free_port
from bench.peers.server import Endpoint, Server, http_status


class NatsServer(Server):
    kind = "nats"

    def __init__(self, workdir: Path, fsync: str = "interval") -> None:
        super().__init__(workdir, fsync)
        self.port = free_port()
        self.monitor_port = free_port()

    def _process(self) -> ManagedProcess:
        argv = ["/usr/sbin/nats-server", "-js", "-sd", str(self.data_dir), "-a", "127.0.0.1",
                "-p", str(self.port), "-m", str(self.monitor_port)]
        return ManagedProcess(argv, dict(os.environ), self.workdir / "nats.log")

    def _ready(self) -> bool:
        # /healthz reports 200 only once JetStream has recovered its streams.
        return http_status(f"http://127.0.0.1:{self.monitor_port}/healthz") == 200

    def endpoint(self) -> Endpoint:
        return Endpoint(self.kind, self.port, self.monitor_port)

    def durability(self) -> str:
        return "JetStream file storage (written to the OS on ack, fsynced by the server's own schedule)"
