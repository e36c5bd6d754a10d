"""Operations: overview, storage, messages by id, health, readiness, Prometheus metrics."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from fastapi import APIRouter, Request
from prometheus_client import generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.responses import PlainTextResponse, Response

from chunkmq import metrics
from chunkmq.alerts.jobs import Alerts
from chunkmq.api import schemas
from chunkmq.api.access import AUTHORIZE
from chunkmq.api.auth import Principal
from chunkmq.api.deps import broker_of, json, raw_json
from chunkmq.boot import readiness
from chunkmq.broker import views
from chunkmq.broker.broker import Broker
from chunkmq.broker.errors import NotFound
from chunkmq.wire import codes

router = APIRouter(tags=["operations"])


@router.get("/api/v1/overview", responses=schemas.answers(schemas.Overview))
async def overview(request: Request) -> Response:
    return json(views.overview(broker_of(request)))


@router.get("/api/v1/storage/chunks", responses=schemas.answers(list[schemas.Chunk]))
async def chunks(request: Request) -> Response:
    return json(views.chunk_views(broker_of(request)))


@router.get("/api/v1/messages/{message_id}", responses=schemas.answers(schemas.Message, codes.MESSAGE_NOT_FOUND))
async def get_message(message_id: str, request: Request, who: Principal = AUTHORIZE) -> Response:
    broker = broker_of(request)
    if broker.cold:  # a chunk in the tier's bucket only: fetched off the loop
        await broker.warm_message(message_id)
    queue, body = broker.get_message(message_id)
    # a message no queue holds (unroutable) is for admins; one the token may not read answers as an id
    # that does not exist (app/api/access.py)
    if not (who.permissions.is_admin if queue is None else who.may("read", queue)):
        raise NotFound(f"no message with id {message_id!r}", code=codes.MESSAGE_NOT_FOUND)
    return raw_json(body)


@router.get("/healthz", responses=schemas.answers(schemas.Health))
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", responses={**schemas.answers(schemas.Readiness), **schemas.answers(
    schemas.Readiness, status=503, description="Starting, or publishes are refused for lack of space")})
async def readyz(request: Request) -> Response:
    status, body = readiness(getattr(request.app.state, "broker", None))  # as a start's first stage answers
    return json(body, status)


@router.get("/metrics", response_class=PlainTextResponse, responses=schemas.answers(
    None, codes.UNAUTHORIZED, media={"text/plain": {"schema": {"type": "string"}}},
    description="Prometheus text format; 401 only with CHUNKMQ_METRICS_REQUIRE_TOKEN=true"))
async def prometheus_metrics(request: Request) -> Response:
    """Prometheus text format. Open by default; CHUNKMQ_METRICS_REQUIRE_TOKEN=true asks for a token
    (it names every queue and group): app/api/access.py."""
    return Response(generate_latest(metrics.registry), media_type="text/plain; version=0.0.4; charset=utf-8")


class BrokerCollector(Collector):
    """Message counts, queue depth and group lag, read from the broker at scrape time."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        return self._families(views.queue_gauges(self.broker))

    def describe(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        """The families without the per-queue samples: registering the collector calls this, where it
        would otherwise collect over every queue and group (seconds with a hundred thousand)."""
        return self._families(())

    def _families(self, queues: Iterable[views.QueueGauge]) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        counted = views.counters(self.broker)
        for name, doc, value in (
            ("published", "Messages stored by publishes", counted.published),
            ("delivered", "Messages delivered to consumers", counted.delivered),
            ("acked", "Messages acknowledged by consumers", counted.acked),
            ("dead_lettered", "Messages sent to a dead-letter exchange", counted.dead_lettered),
            ("dropped", "Messages dropped by queue limits, delivery limits or the disk budget", counted.dropped),
            ("expired", "Messages that expired before a group received them", counted.expired),
        ):
            yield CounterMetricFamily(f"chunkmq_messages_{name}", doc, value=value)
        depth = GaugeMetricFamily("chunkmq_queue_messages", "Messages held by a queue", labels=["queue"])
        size = GaugeMetricFamily("chunkmq_queue_bytes", "Bytes held by a queue", labels=["queue"])
        lag = GaugeMetricFamily("chunkmq_group_lag", "Messages a group has not finished", labels=["queue", "group"])
        dropped = CounterMetricFamily(
            "chunkmq_queue_messages_dropped",
            "Messages deleted from a queue by its limits, age or the drop_oldest disk budget", labels=["queue"],
        )
        expired = CounterMetricFamily(
            "chunkmq_queue_messages_expired", "Messages of a queue its groups passed as expired", labels=["queue"],
        )
        scheduled = GaugeMetricFamily(
            "chunkmq_queue_messages_scheduled", "Delayed messages of a queue not due yet", labels=["queue"],
        )
        missed = CounterMetricFamily(
            "chunkmq_group_messages_missed", "Messages deleted before a group consumed them", labels=["queue", "group"]
        )
        for q in queues:
            depth.add_metric([q.name], q.messages)
            size.add_metric([q.name], q.bytes)
            dropped.add_metric([q.name], q.messages_dropped)
            expired.add_metric([q.name], q.expired)
            scheduled.add_metric([q.name], q.scheduled)
            for g in q.groups:
                lag.add_metric([q.name, g.name], g.lag)
                missed.add_metric([q.name, g.name], g.missed)
        space = views.storage(self.broker)
        disk = GaugeMetricFamily("chunkmq_disk_bytes", "Bytes used by the store on disk")
        disk.add_metric([], space.disk_bytes)
        data_dir = GaugeMetricFamily(
            "chunkmq_data_dir_bytes", "Bytes allocated under the data directory (what the disk budget counts)"
        )
        data_dir.add_metric([], space.data_dir_bytes)
        refused = CounterMetricFamily("chunkmq_publishes_refused_by_budget", "Publishes refused by the disk budget")
        refused.add_metric([], space.refused_by_budget)
        yield from (depth, size, lag, dropped, expired, scheduled, missed, disk, data_dir, refused)
        tier = views.tier(self.broker)
        if tier is not None:
            for name, doc, value in (
                ("lag_bytes", "Bytes of sealed chunks not yet verified in the tier's bucket", tier.lag_bytes),
                ("bucket_bytes", "Bytes of the chunk objects in the tier's bucket", tier.bucket_bytes),
                ("upload_failures", "Failed tier upload rounds in a row", tier.failures),
            ):
                yield GaugeMetricFamily(f"chunkmq_tier_{name}", doc, value=value)
            for name, doc, value in (
                ("uploaded_bytes", "Bytes uploaded to the tier's bucket", tier.uploaded_bytes),
                ("fetches", "Chunks fetched back from the tier's bucket", tier.fetches),
                ("evictions", "Chunks evicted from the local disk to the tier's bucket", tier.evictions),
            ):
                yield CounterMetricFamily(f"chunkmq_tier_{name}", doc, value=value)


class AlertCollector(Collector):
    """Firing alerts (one gauge per alert, value 1) and mail outcomes, read at scrape time."""

    def __init__(self, alerts: Alerts) -> None:
        self.alerts = alerts

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        firing = GaugeMetricFamily("chunkmq_alert_firing", "1 for every firing alert",
                                   labels=["rule", "kind", "queue", "group"])
        for a in self.alerts.firing():
            firing.add_metric([str(a.rule_id), a.kind, a.queue, a.group], 1)
        yield firing
        outbox = self.alerts.outbox
        yield CounterMetricFamily("chunkmq_alert_mails_sent", "Alert mails delivered", value=outbox.sent)
        yield CounterMetricFamily("chunkmq_alert_mail_failures", "Alert mail attempts that failed", value=outbox.failed)
        yield GaugeMetricFamily("chunkmq_alert_mails_waiting", "Alert notices in the outbox, not mailed yet",
                                value=outbox.waiting)
