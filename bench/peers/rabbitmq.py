"""rabbitmq-server (with the management and stream plugins) run as our own child, all under a temp dir.

Run directly, not through Debian's wrapper (which `su`s to the rabbitmq user). Erlang's port mapper
(epmd) gets a private port so it never collides with a system one, and we kill exactly that epmd at stop.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from bench.peers.process import ManagedProcess, free_port, port_open
from bench.peers.server import Endpoint, Server, http_status

BINARY = "/usr/lib/rabbitmq/bin/rabbitmq-server"


class RabbitmqServer(Server):
    kind = "rabbitmq"
    start_timeout = 180.0

    def __init__(self, workdir: Path, fsync: str = "interval") -> None:
        super().__init__(workdir, fsync)
        self.port = free_port()
        self.http_port = free_port()
        self.dist_port = free_port()
        self.epmd_port = free_port()
        self.stream_port = free_port()
        conf = workdir / "rabbitmq.conf"
        conf.write_text(
            f"listeners.tcp.default = 127.0.0.1:{self.port}\n"
            f"management.tcp.ip = 127.0.0.1\nmanagement.tcp.port = {self.http_port}\n"
            f"stream.listeners.tcp.default = 127.0.0.1:{self.stream_port}\n"
            # The stream protocol tells clients where to connect: this node, not its host name.
            "stream.advertised_host = 127.0.0.1\n"
            f"stream.advertised_port = {self.stream_port}\n"
            # Stats collection costs CPU on every message; keep RabbitMQ's default interval.
            "log.console = true\nlog.console.level = warning\nlog.file = false\n"
        )
        (workdir / "enabled_plugins").write_text("[rabbitmq_management,rabbitmq_stream].\n")
        (workdir / "rabbitmq-env.conf").write_text("")

    def _env(self) -> dict[str, str]:
        w = self.workdir
        return {
            **os.environ,
            "HOME": str(w),  # the Erlang cookie is written to $HOME
            "RABBITMQ_NODENAME": f"bench{self.port}@localhost",
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "ERL_EPMD_PORT": str(self.epmd_port),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "RABBITMQ_MNESIA_BASE": str(self.data_dir / "mnesia"),
            "RABBITMQ_LOG_BASE": str(w / "log"),
            "RABBITMQ_CONFIG_FILE": str(w / "rabbitmq"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(w / "advanced.config"),
            "RABBITMQ_CONF_ENV_FILE": str(w / "rabbitmq-env.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(w / "enabled_plugins"),
            "RABBITMQ_PLUGINS_EXPAND_DIR": str(w / "plugins-expand"),
            "RABBITMQ_PID_FILE": str(w / "rabbitmq.pid"),
        }

    def _process(self) -> ManagedProcess:
        return ManagedProcess([BINARY], self._env(), self.workdir / "rabbitmq.log", cwd=self.workdir)

    def _ready(self) -> bool:
        return port_open(self.port) and port_open(self.stream_port) and http_status(
            f"http://127.0.0.1:{self.http_port}/api/overview", auth=("guest", "guest")) == 200

    def _after_stop(self) -> None:
        # epmd daemonises out of our process group; stop the one on our private port, nothing else.
        subprocess.run(["epmd", "-port", str(self.epmd_port), "-kill"], env=self._env(),
                       capture_output=True, check=False, timeout=10)

    @property
    def queue_type(self) -> str:
        # Quorum queues fsync their log before they confirm; classic queues batch their fsyncs.
        return "quorum" if self.fsync == "always" else "classic"

    def endpoint(self) -> Endpoint:
        return Endpoint(self.kind, self.port, self.http_port,
                        {"stream_port": str(self.stream_port), "queue_type": self.queue_type})

    def durability(self) -> str:
        if self.queue_type == "quorum":
            return "quorum queues, publisher confirms (sent once the Raft log is fsynced)"
        return ("durable classic queues, persistent messages, publisher confirms (sent after the message "
                "store's fsync, batched); streams (rabbitmq-stream): confirm once written, no fsync")
