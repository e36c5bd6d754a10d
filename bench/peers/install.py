"""Make sure each peer's Debian package is installed; install it with apt-get when it is missing.

A peer that cannot be installed is reported (`Installed.error`), never silently dropped.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

# server kind -> (Debian package, binary the harness runs)
PACKAGES: dict[str, tuple[str, str]] = {
    "rabbitmq": ("rabbitmq-server", "/usr/lib/rabbitmq/bin/rabbitmq-server"),
    "redis": ("redis-server", "/usr/bin/redis-server"),
    "nats": ("nats-server", "/usr/sbin/nats-server"),
}


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
    missing = [k for k in kinds if not os.path.exists(PACKAGES[k][1])]
    error = _apt_install([PACKAGES[k][0] for k in missing]) if missing else None
    result: dict[str, Installed] = {}
    for kind in kinds:
        package, binary = PACKAGES[kind]
        if os.path.exists(binary):
            result[kind] = Installed(kind, package, package_version(package))
        else:
            result[kind] = Installed(kind, package, None, error or f"{binary} missing after install")
    return result
