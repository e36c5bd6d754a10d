"""nats-server with JetStream file storage in a temporary directory, configured by a file.

JetStream writes every message to the OS on ack and fsyncs on a timer (`sync_interval`, 2 minutes by
default); the fsync-before-ack class sets `sync_interval: always`, which fsyncs before each ack.
"""

from __future__ import annotations

import os
from pathlib import Path

import orjson

from bench.peers.install import binary
from bench.peers.process import ManagedProcess, free_port
from bench.peers.server import Endpoint, Server, http_status


class NatsServer(Server):
    kind = "nats"

    def __init__(self, workdir: Path, fsync: str = "interval") -> None:
        super().__init__(workdir, fsync)
        self.port = free_port()
        self.monitor_port = free_port()

    @property
    def sync_always(self) -> bool:
        return self.fsync == "always"

    def config(self) -> str:
        sync = "\n  sync_interval: always" if self.sync_always else ""
        return (f"listen: 127.0.0.1:{self.port}\nhttp: 127.0.0.1:{self.monitor_port}\n"
                f"jetstream {{\n  store_dir: {orjson.dumps(str(self.data_dir)).decode()}{sync}\n}}\n")

    def _process(self) -> ManagedProcess:
        conf = self.workdir / "nats.conf"
        conf.write_text(self.config())
        return ManagedProcess([binary("nats"), "-c", str(conf)], dict(os.environ), self.workdir / "nats.log")

    def _ready(self) -> bool:
        # /healthz reports 200 only once JetStream has recovered its streams.
        return http_status(f"http://127.0.0.1:{self.monitor_port}/healthz") == 200

    def endpoint(self) -> Endpoint:
        return Endpoint(self.kind, self.port, self.monitor_port)

    def durability(self) -> str:
        if self.sync_always:
            return "JetStream file storage, sync_interval: always (fsync before every ack)"
        return "JetStream file storage (written to the OS on ack, fsynced every 2 minutes by default)"
