"""A throwaway PostgreSQL cluster for the tests: `initdb` in a fresh temporary directory, started on a
free 127.0.0.1 port, removed when stopped. One per test session (tests/conftest.py `pg`); each test
that needs a database gets its own (`PgCluster.database`).

The password is random per cluster (no password in the repository). PostgreSQL refuses to run as
root, and the tests do: then the server runs as the `postgres` system user (Debian's package makes
it), with a data and socket directory that user owns.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tests.server import free_port

USER = "chunkmq"
# The server's own user when the tests run as root (PostgreSQL will not run as root).
SYSTEM_USER = "postgres"


def pg_bin() -> Path:
    """The newest installed server's bin directory (Debian: /usr/lib/postgresql/<major>/bin)."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: int(p.parent.parent.name))
    if not found:
        raise RuntimeError("no PostgreSQL server under /usr/lib/postgresql: `make test` installs Debian's postgresql")
    return found[-1].parent


class PgCluster:
    def __init__(self) -> None:
        self.bin = pg_bin()
        self.root = Path(tempfile.mkdtemp(prefix="chunkmq-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self.password = secrets.token_hex(16)
        self._names = itertools.count()
        self._migrated: str | None = None
        self._as = [] if os.geteuid() != 0 else ["runuser", "-u", SYSTEM_USER, "--"]
        if self._as:
            owner = pwd.getpwnam(SYSTEM_USER)
            os.chown(self.root, owner.pw_uid, owner.pw_gid)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://{USER}:{self.password}@127.0.0.1:{self.port}/{database}"

    def _run(self, *args: str) -> None:
        subprocess.run([*self._as, *args], check=True, capture_output=True, timeout=60, cwd=self.root)

    def init(self) -> PgCluster:
        pwfile = self.root / "pwfile"
        pwfile.write_text(self.password)
        if self._as:
            owner = pwd.getpwnam(SYSTEM_USER)
            os.chown(pwfile, owner.pw_uid, owner.pw_gid)
        # The superuser is `chunkmq`; only password logins over TCP (no socket logins for other users).
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", USER, f"--pwfile={pwfile}",
                  "--auth-host=scram-sha-256", "--auth-local=scram-sha-256", "-E", "UTF8", "--no-locale",
                  "--no-sync")
        pwfile.unlink()
        return self

    def start(self) -> PgCluster:
        # fsync off: a test cluster need not survive a power cut, and its databases come and go.
        options = (f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
                   "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200")
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.root / "server.log"),
                  "-o", options, "-w", "-t", "60", "start")
        return self

    def stop(self) -> None:
        """Stop the server (fast: open connections are cut), keeping its data for a `start()`."""
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    def remove(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def log(self) -> str:
        path = self.root / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def execute(self, sql: str) -> None:
        """Run one statement outside a transaction (CREATE / DROP DATABASE), on the postgres database."""
        import psycopg

        with psycopg.connect(self.url().replace("+psycopg", ""), autocommit=True) as conn:
            conn.execute(sql)  # type: ignore[arg-type]  # our own statements, no user input

    def _head(self) -> str:
        """A database migrated to the newest schema, made once: migrated databases are copies of it."""
        if self._migrated is None:
            from chunkmq.meta import upgrade

            self.execute("CREATE DATABASE head")
            upgrade(self.url("head"))
            self._migrated = "head"
        return self._migrated

    @contextlib.contextmanager
    def database(self, migrated: bool = False) -> Iterator[str]:
        """A new database (its SQLAlchemy URL), empty or `migrated` to the newest schema, dropped
        afterwards with every connection to it."""
        template = self._head() if migrated else "template1"
        name = f"t{os.getpid()}_{next(self._names)}"
        self.execute(f"CREATE DATABASE {name} TEMPLATE {template} STRATEGY FILE_COPY")
        try:
            yield self.url(name)
        finally:
            self.execute(f"DROP DATABASE {name} WITH (FORCE)")
