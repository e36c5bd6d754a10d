"""Run the configured peers and workloads, one server at a time, and always stop what was started."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from multiprocessing.pool import Pool
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import IO, Any

import orjson

from bench.adapters.registry import ADAPTERS, HTTP_CAPABLE, HTTP_ONLY, W8_CAPABLE
from bench.client import init_worker
from bench.config import DURABLE_WORKLOADS, Config
from bench.metrics import METRICS, Sample
from bench.peers import install
from bench.peers.chunkmq import ChunkmqServer
from bench.peers.nats import NatsServer
from bench.peers.rabbitmq import RabbitmqServer
from bench.peers.redis import RedisServer
from bench.peers.server import Server
from bench.workloads import ROUTINES, Session

SERVERS: dict[str, type[Server]] = {
    "chunkmq": ChunkmqServer, "rabbitmq": RabbitmqServer, "redis": RedisServer, "nats": NatsServer,
}


def workloads_for(adapter: str, selected: list[str]) -> list[str]:
    """The routines (see workloads.ROUTINES) this adapter runs, given the selected workloads."""
    names = []
    for name, (_fn, covers) in ROUTINES.items():
        if not set(covers) & set(selected):
            continue
        if adapter in HTTP_ONLY and name not in ("W7", "W8"):
            continue
        if name == "W8" and adapter not in W8_CAPABLE:
            continue
        if name == "W7" and adapter not in HTTP_CAPABLE:
            continue
        names.append(name)
    return names


def _metrics_of(covers: tuple[str, ...]) -> list[str]:
    return [k for k, m in METRICS.items() if m.workload in covers]


class Recorder:
    """Collects samples and appends each to the JSON-lines file as it arrives, so a crash keeps data."""

    def __init__(self, cfg: Config, out: IO[bytes], log: IO[str]) -> None:
        self.cfg = cfg
        self.out = out
        self.log = log
        self.samples: list[Sample] = []
        self.installed: set[str] = set()
        self.described: set[str] = set()

    def load(self, at: str) -> None:
        """The machine's load average now: the report states the load the numbers were taken under."""
        self.write({"type": "load", "at": at, "loadavg": [round(x, 2) for x in os.getloadavg()]})

    def write(self, record: dict[str, Any]) -> None:
        self.out.write(orjson.dumps(record) + b"\n")
        self.out.flush()

    def add(self, samples: list[Sample]) -> None:
        for s in samples:
            if METRICS[s.metric].workload not in self.cfg.workloads:
                continue  # measured only because a selected workload needed it (W1 fills W2's queue)
            self.samples.append(s)
            self.write(s.to_json())
            shown = "ERROR " + (s.error or "") if s.value is None else f"{s.value:,.2f} {s.unit}"
            print(f"  {s.peer:14} {s.metric:12} #{s.repeat} {shown}", file=self.log, flush=True)

    def fail(self, adapter: str, covers: tuple[str, ...], repeat: int, error: str) -> None:
        self.add([Sample(adapter, k, repeat, None, METRICS[k].unit, error=error) for k in _metrics_of(covers)])


class ClientPools:
    """Per adapter, two client processes (W4 needs a producer and a consumer at once; the other phases
    use one), kept for the whole run: both durability classes use them, and spawning them (every
    client library imported) costs more than a smoke run's phases."""

    def __init__(self) -> None:
        self.ctx = multiprocessing.get_context("spawn")
        self.pools: dict[str, tuple[Pool, Event]] = {}

    def get(self, adapter: str) -> tuple[Pool, Event]:
        if adapter not in self.pools:
            ready = self.ctx.Event()
            self.pools[adapter] = (self.ctx.Pool(2, initializer=init_worker, initargs=(ready,)), ready)
        return self.pools[adapter]

    def discard(self, adapter: str) -> None:
        """After a failed phase, whose client may still be busy: the next one gets fresh processes."""
        pool, _ = self.pools.pop(adapter, (None, None))
        if pool is not None:
            pool.terminate()
            pool.join()

    def close(self) -> None:
        for adapter in list(self.pools):
            self.discard(adapter)


def _run_adapter(cfg: Config, server: Server, adapter: str, workloads: list[str], rec: Recorder,
                 pools: ClientPools) -> None:
    for name in workloads_for(adapter, workloads):
        fn, covers = ROUTINES[name]
        rec.load(f"{adapter} {name}")
        for r in range(cfg.repeat):
            session = Session(cfg, server, adapter, *pools.get(adapter))
            print(f"{adapter}: {name} repeat {r + 1}/{cfg.repeat}", file=rec.log, flush=True)
            try:
                fn(session, r)
            except Exception as e:  # one failed workload must not end the run
                rec.add(session.samples)
                rec.fail(adapter, covers, r, f"{type(e).__name__}: {e}"[:1000])
                pools.discard(adapter)
                if server.process is None or not server.process.alive():
                    server.start()  # a failed restart (W6) leaves it down; the next repeat needs it
                continue
            rec.add(session.samples)


def _describe(adapter: str, server: Server) -> str:
    """The adapter's client setup as verified against the running server (the report header shows it)."""
    try:
        return ADAPTERS[adapter].describe(server.endpoint())
    except Exception as e:  # the workloads will fail and say why; the header says it too
        return f"{ADAPTERS[adapter].setup} (could not verify: {type(e).__name__}: {e})"


def passes(cfg: Config) -> list[tuple[str, list[str]]]:
    """(fsync mode, workloads) per round of servers: the default class, then the fsync-before-ack class."""
    default = [w for w in cfg.workloads if w not in DURABLE_WORKLOADS]
    durable = [w for w in cfg.workloads if w in DURABLE_WORKLOADS]
    return [(f, ws) for f, ws in ((cfg.fsync, default), ("always", durable)) if ws]


def run(cfg: Config, out: IO[bytes], log: IO[str] = sys.stderr) -> Recorder:
    rec = Recorder(cfg, out, log)
    for unknown in set(cfg.peers) - set(ADAPTERS):
        raise ValueError(f"unknown peer {unknown!r}; known: {', '.join(ADAPTERS)}")
    rec.load("start")
    pools = ClientPools()
    try:
        for fsync, workloads in passes(cfg):
            _run_pass(cfg, fsync, workloads, rec, pools)
    finally:
        pools.close()
    rec.load("end")
    return rec


def _run_pass(cfg: Config, fsync: str, workloads: list[str], rec: Recorder, pools: ClientPools) -> None:
    """Every peer that has something to run, one server kind at a time, with servers in `fsync` mode."""
    log = rec.log
    klass = "fsync before ack" if fsync == "always" else "default"
    adapters = []
    for a in cfg.peers:
        if not workloads_for(a, workloads):
            continue
        why = ADAPTERS[a].no_fsync_before_ack
        if fsync == "always" and why:  # it would not be compared with its equal
            print(f"{a}: not in the fsync-before-ack class: {why}", file=log, flush=True)
            rec.write({"type": "excluded", "peer": a, "reason": f"not in the fsync-before-ack class: {why}"})
        else:
            adapters.append(a)
    kinds = list(dict.fromkeys(ADAPTERS[a].server for a in adapters))
    installed = install.ensure([k for k in kinds if k != "chunkmq"])
    for inst in installed.values():
        if inst.kind not in rec.installed:  # once per run, not per class
            rec.installed.add(inst.kind)
            rec.write({"type": "peer", "kind": inst.kind, "package": inst.package, "version": inst.version,
                       "error": inst.error})
    for kind in kinds:
        mine = [a for a in adapters if ADAPTERS[a].server == kind]
        inst = installed.get(kind)
        if inst is not None and inst.error:
            print(f"{kind}: MISSING ({inst.error.strip()[:300]})", file=log, flush=True)
            for a in mine:
                for name in workloads_for(a, workloads):
                    rec.fail(a, ROUTINES[name][1], 0, f"missing: {inst.package} could not be installed")
            continue
        workdir = Path(tempfile.mkdtemp(prefix=f"bench-{kind}-"))
        server = SERVERS[kind](workdir, fsync)
        try:
            t0 = time.monotonic()
            try:
                server.start()
            except Exception as e:  # reported as that peer's result, the run goes on
                print(f"{kind}: failed to start: {e}", file=log, flush=True)
                for a in mine:
                    for name in workloads_for(a, workloads):
                        rec.fail(a, ROUTINES[name][1], 0, f"server did not start: {e}"[:1000])
                continue
            endpoint = server.endpoint()
            shown = {**endpoint.__dict__, "extra": {k: v for k, v in endpoint.extra.items() if k != "token"}}
            rec.write({"type": "server", "kind": kind, "class": klass, "start_s": round(time.monotonic() - t0, 3),
                       "durability": server.durability(), "endpoint": shown})  # no credential in the results
            for a in mine:
                if a not in rec.described:
                    rec.described.add(a)
                    rec.write({"type": "client", "peer": a, "setup": _describe(a, server)})
            for a in mine:
                _run_adapter(cfg, server, a, workloads, rec, pools)
        finally:
            server.stop()
            shutil.rmtree(workdir, ignore_errors=True)
