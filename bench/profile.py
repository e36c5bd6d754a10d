"""Sample the chunkmq server with py-spy while a workload runs, and summarise where its CPU goes."""

from __future__ import annotations

import collections
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from types import TracebackType


def _py_spy() -> str | None:
    local = Path(sys.executable).with_name("py-spy")
    return str(local) if local.exists() else shutil.which("py-spy")


class Profiler:
    """Context manager: `py-spy record` on `pid` into `<prefix>.txt` (collapsed stacks) + a summary."""

    def __init__(self, pid: int, prefix: Path, rate: int = 250) -> None:
        self.pid = pid
        self.prefix = prefix
        self.rate = rate
        self.proc: subprocess.Popen[bytes] | None = None
        self.error: str | None = None

    def __enter__(self) -> Profiler:
        exe = _py_spy()
        if exe is None:
            self.error = "py-spy not installed"
            return self
        self.prefix.parent.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [exe, "record", "--pid", str(self.pid), "--rate", str(self.rate), "--format", "raw",
             "--output", str(self.prefix.with_suffix(".txt")), "--nonblocking"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        try:
            _, err = self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        raw = self.prefix.with_suffix(".txt")
        if raw.exists():
            self.prefix.with_suffix(".summary.md").write_text(summarize(raw))
        else:
            self.error = err.decode(errors="replace")[-500:]
            self.prefix.with_suffix(".summary.md").write_text(f"py-spy failed: {self.error}\n")


def _function(frame: str) -> str:
    """`f (path.py:12)` -> `f (path.py)`: lines of one function add up."""
    name, sep, where = frame.partition(" (")
    return f"{name} ({where.rsplit(':', 1)[0]})" if sep and ":" in where else frame


def summarize(collapsed: Path, top: int = 15) -> str:
    """Top functions by own time and by total time, from py-spy's collapsed-stack output."""
    own: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    samples = 0
    for line in collapsed.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        samples += count
        frames = [_function(f) for f in stack.split(";")]
        own[frames[-1]] += count
        for frame in set(frames):
            total[frame] += count
    if samples == 0:
        return "no samples\n"
    lines = [f"{samples} samples\n", "| own % | function |", "|---:|---|"]
    lines += [f"| {100 * c / samples:.1f} | `{f}` |" for f, c in own.most_common(top)]
    # Inclusive time of chunkmq's own functions: the framework frames above them add no information.
    ours = [(f, c) for f, c in total.most_common() if " (app/" in f][:top]
    lines += ["", "| total % | chunkmq function |", "|---:|---|"]
    lines += [f"| {100 * c / samples:.1f} | `{f}` |" for f, c in ours]
    return "\n".join(lines) + "\n"
