"""Turn the JSON-lines records of a run into markdown tables and the chunkmq / best-peer ratios."""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from bench.adapters.registry import CHUNKMQ
from bench.config import ALL_PEERS
from bench.metrics import METRICS, Summary, summarize

Records = list[dict[str, Any]]
#: W8's bare ASGI apps on chunkmq's server stack (bench/floor.py): beside chunkmq, never its peer
FLOORS = {"floor-http": "chunkmq-http", "floor-ws": "chunkmq-ws"}


def _fmt(value: float, unit: str) -> str:
    if unit in ("msgs/s", "req/s"):
        return f"{value:,.0f}"
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"


def _grouped(records: Records, field: str = "value") -> dict[tuple[str, str], list[float]]:
    out: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in records:
        if r.get("type") == "sample" and r.get(field) is not None and r.get("value") is not None:
            out[(r["metric"], r["peer"])].append(float(r[field]))
    return out


def _errors(records: Records) -> dict[tuple[str, str], str]:
    return {(r["metric"], r["peer"]): r["error"] for r in records
            if r.get("type") == "sample" and r.get("error")}


def _peers(records: Records) -> list[str]:
    seen = {r["peer"] for r in records if r.get("type") == "sample"}
    return [p for p in ALL_PEERS if p in seen] + sorted(seen - set(ALL_PEERS))


def _cell(summary: Summary | None, error: str | None, unit: str) -> str:
    if summary is None:
        return "missing" if error and error.startswith("missing") else ("error" if error else "")
    spread = f" ±{summary.spread_pct:.0f}%" if summary.n > 1 else ""
    return _fmt(summary.median, unit) + spread


def results_table(records: Records) -> str:
    """Every peer x workload, then the best chunkmq variant over the best peer (`ratio_lines`)."""
    values, errors, peers = _grouped(records), _errors(records), _peers(records)
    by_metric = {r.metric: r for r in ratios(records)}
    lines = ["| workload | unit | " + " | ".join(peers) + " | chunkmq / best peer |",
             "|---|---|" + "---:|" * (len(peers) + 1)]
    for key, m in METRICS.items():
        cells = [_cell(summarize(values.get((key, p), [])), errors.get((key, p)), m.unit) for p in peers]
        if any(cells):
            r = by_metric.get(key)
            ratio = f"**{r.ratio:.2f}x** {r.best_peer}" if r else ""
            lines.append(f"| {m.title} | {m.unit} | " + " | ".join(cells) + f" | {ratio} |")
    return "\n".join(lines)


def cpu_table(records: Records) -> str:
    """Median server and client CPU seconds per throughput phase: which side dominates."""
    server, client, peers = _grouped(records, "server_cpu_s"), _grouped(records, "client_cpu_s"), _peers(records)
    lines = ["| workload (CPU s: server / client) | " + " | ".join(peers) + " |", "|---|" + "---:|" * len(peers)]
    for key, m in METRICS.items():
        if m.unit != "msgs/s" or not m.compared:
            continue
        cells = []
        for p in peers:
            s, c = summarize(server.get((key, p), [])), summarize(client.get((key, p), []))
            cells.append(f"{s.median:.2f} / {c.median:.2f}" if s and c else "")
        if any(cells):
            lines.append(f"| {m.title} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


@dataclass(frozen=True)
class Ratio:
    metric: str
    chunkmq_peer: str
    chunkmq_value: float
    best_peer: str
    best_value: float

    @property
    def ratio(self) -> float:
        return self.chunkmq_value / self.best_value if self.best_value else float("inf")

    @property
    def chunkmq_better(self) -> bool:
        hib = METRICS[self.metric].higher_is_better
        return self.chunkmq_value > self.best_value if hib else self.chunkmq_value < self.best_value


def ratios(records: Records) -> list[Ratio]:
    """Per metric: the best chunkmq variant's median over the best peer's median."""
    values = _grouped(records)
    out = []
    for key, m in METRICS.items():
        if not m.compared:
            continue
        medians = {p: s.median for (k, p), v in values.items() if k == key and (s := summarize(v))}
        ours = {p: v for p, v in medians.items() if p in CHUNKMQ}
        theirs = {p: v for p, v in medians.items() if p not in CHUNKMQ and p not in FLOORS}
        if not ours or not theirs:
            continue
        pick = max if m.higher_is_better else min
        cp = pick(ours, key=lambda p: ours[p])
        bp = pick(theirs, key=lambda p: theirs[p])
        out.append(Ratio(key, cp, ours[cp], bp, theirs[bp]))
    return out


def ratio_lines(records: Records) -> str:
    lines = []
    for r in ratios(records):
        m = METRICS[r.metric]
        direction = "higher is better" if m.higher_is_better else "lower is better"
        verdict = "chunkmq ahead" if r.chunkmq_better else "peer ahead"
        lines.append(f"- {m.title}: {r.chunkmq_peer} {_fmt(r.chunkmq_value, m.unit)} / {r.best_peer} "
                     f"{_fmt(r.best_value, m.unit)} {m.unit} = **{r.ratio:.2f}x** ({direction}; {verdict})")
    return "\n".join(lines) if lines else "- (no workload had both a chunkmq and a peer result)"


def floor_lines(records: Records) -> str:
    """W8: chunkmq over the bare ASGI floor of its own server stack, and fsync=always's group commit."""
    medians = {k: s.median for k, v in _grouped(records).items() if (s := summarize(v))}
    lines = []
    for floor, ours in FLOORS.items():
        for key in ("w8_cpu_us", "w8_rate"):
            if (key, floor) in medians and (key, ours) in medians:
                m = METRICS[key]
                lines.append(f"- {m.title}: {ours} {_fmt(medians[(key, ours)], m.unit)} / {floor} "
                             f"{_fmt(medians[(key, floor)], m.unit)} {m.unit} = "
                             f"**{medians[(key, ours)] / medians[(key, floor)]:.2f}x**")
    one, many = medians.get(("w8_always_1", "chunkmq-http")), medians.get(("w8_always_n", "chunkmq-http"))
    if one and many:
        lines.append(f"- W8 fsync=always: N connections {_fmt(many, 'req/s')} / 1 connection {_fmt(one, 'req/s')} "
                     f"req/s = **{many / one:.2f}x** (group commit)")
    return "\n".join(lines)


def _load(records: Records) -> str:
    """The 1-minute load average over the run: sampled at its start, before each workload, at its end."""
    loads = [r["loadavg"][0] for r in records if r.get("type") == "load"]
    if not loads:
        return ""
    return (f"- load average (1 min) during the run: median {statistics.median(loads):.1f}, "
            f"min {min(loads):.1f}, max {max(loads):.1f} ({len(loads)} samples; the machine has "
            f"{next((r['machine']['cores'] for r in records if r.get('type') == 'meta'), '?')} cores)")


def header(records: Records) -> str:
    lines, clients = [], []
    for r in records:
        if r.get("type") == "meta":
            mach = r["machine"]
            lines += [f"- command: `{r['command']}`",
                      f"- machine: {mach['cores']} cores ({mach['cpu']}), {mach['ram_gib']} GiB RAM, "
                      f"disk {mach['disk']}, kernel {mach['kernel']}, Python {mach['python']}, "
                      f"load average at start {mach['load_avg_at_start']}",
                      "- clients: " + ", ".join(f"{k} {v}" for k, v in mach["libraries"].items() if v),
                      f"- repeats: {r['config']['repeat']} (median, ± half the min-max range)"]
        elif r.get("type") == "peer":
            state = r["version"] or f"MISSING: {r['error']}"
            lines.append(f"- {r['package']}: {state}")
        elif r.get("type") == "server":
            lines.append(f"- {r['kind']} durability ({r.get('class', 'default')} class): {r['durability']}")
        elif r.get("type") == "client":
            clients.append(f"  - {r['peer']}: {r['setup']}")
        elif r.get("type") == "excluded":
            lines.append(f"- {r['peer']} not run: {r['reason']}")
    # Each peer's client setup (as verified at run time) sits under the clients line.
    at = next((i + 1 for i, line in enumerate(lines) if line.startswith("- clients: ")), len(lines))
    load = _load(records)
    lines = lines[:1] + ([load] if load else []) + lines[1:]  # right under the command
    at += 1 if load else 0
    return "\n".join(lines[:at] + clients + lines[at:])


def render(records: Records) -> str:
    """The table first, then how it was measured: the top of docs/benchmarks.md, ready to paste."""
    return "\n\n".join([
        results_table(records),
        header(records),
        cpu_table(records),
        "chunkmq / best peer (median of the best chunkmq variant over the median of the best peer):",
        ratio_lines(records),
        *([floors] if (floors := floor_lines(records)) else []),
    ]) + "\n"
