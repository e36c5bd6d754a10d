"""What the numbers were measured on: CPU, RAM, disk and the versions of everything involved."""

from __future__ import annotations

import importlib.metadata
import os
import platform
from pathlib import Path
from typing import Any

import psutil

CLIENT_LIBRARIES = ("pika", "aio-pika", "rstream", "redis", "hiredis", "nats-py", "httpx", "websockets",
                    "orjson", "chunkmq")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _disk(path: Path) -> str:
    """Filesystem type and device of the partition holding `path`."""
    best = None
    target = str(path.resolve())
    for part in psutil.disk_partitions(all=True):
        if target.startswith(part.mountpoint) and (best is None or len(part.mountpoint) > len(best.mountpoint)):
            best = part
    if best is None:
        return "unknown"
    usage = psutil.disk_usage(best.mountpoint)
    return f"{best.fstype} on {best.device} ({usage.total / 2**30:.0f} GiB, {usage.free / 2**30:.0f} GiB free)"


def describe(tmp: Path) -> dict[str, Any]:
    versions = {}
    for lib in CLIENT_LIBRARIES:
        try:
            versions[lib] = importlib.metadata.version(lib)
        except importlib.metadata.PackageNotFoundError:
            versions[lib] = None
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "disk": _disk(tmp),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "libraries": versions,
        "load_avg_at_start": [round(x, 2) for x in os.getloadavg()],
    }
