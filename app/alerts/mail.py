"""Alert mails: composed as plain text + HTML (what fired, where, the numbers, the last hour's trend,
links to the console) and sent with aiosmtplib. `send` never raises anything but MailError."""

from __future__ import annotations

import email.policy
import functools
import ssl
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import make_msgid
from typing import TYPE_CHECKING
from urllib.parse import quote

from chunkmq.alerts.errors import MailError
from chunkmq.alerts.rules import DESCRIPTIONS, GROUP_KINDS, NEVER, UNITS, Kind, Observation
from chunkmq.alerts.state import Notice
from chunkmq.config import Settings
from chunkmq.meta.alerts import AlertRuleRow

if TYPE_CHECKING:
    from jinja2 import Template

SPARKS = "▁▂▃▄▅▆▇█"
# RFC 5322 allows 998 characters a line. At the usual 78, Python folds some Subjects right after
# "Subject:", which mail clients then show with a leading space.
_WIRE = email.policy.SMTP.clone(max_line_length=998)
TREND_BUCKETS = 12  # the hour in 5-minute steps


@dataclass(frozen=True, slots=True)
class Notification:
    """One alert to tell about: the rule, the measurement, and the lag over the last hour."""

    notice: Notice
    rule: AlertRuleRow
    observation: Observation
    at_ms: int
    fired_at_ms: int | None = None
    trend: tuple[tuple[int, int, float], ...] = field(default=())  # (ms, lag, lag seconds)


@dataclass(frozen=True, slots=True)
class Links:
    base: str

    def queue(self, name: str) -> str:
        return f"{self.base}/queues/{quote(name, safe='')}"

    @property
    def alerts(self) -> str:
        return f"{self.base}/alerts"

    @property
    def storage(self) -> str:
        return f"{self.base}/storage"


def sparkline(values: Sequence[float]) -> str:
    if not values:
        return ""
    low, high = min(values), max(values)
    span = (high - low) or 1
    return "".join(SPARKS[min(len(SPARKS) - 1, int((v - low) / span * len(SPARKS)))] for v in values)


def buckets(trend: Sequence[tuple[int, int, float]], now_ms: int) -> list[int | None]:
    """The highest lag in each 5-minute step of the last hour (None: no sample), oldest first."""
    step = 3_600_000 // TREND_BUCKETS
    out: list[int | None] = [None] * TREND_BUCKETS
    for at, lag, _ in trend:
        i = TREND_BUCKETS - 1 - (now_ms - at) // step
        if 0 <= i < TREND_BUCKETS:
            out[i] = lag if out[i] is None else max(out[i] or 0, lag)
    return out


def _when(ms: int | None) -> str:
    return "" if ms is None else datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _number(value: float) -> str:
    return f"{value:,.0f}" if value == int(value) else f"{value:,.1f}"


@dataclass(frozen=True, slots=True)
class _Item:
    """A notification as the templates show it."""

    title: str
    headline: str
    notice: str
    kind: str
    rule_id: int
    queue: str
    group: str
    value: str
    threshold: str
    lag: str
    lag_seconds: str
    consumers: int
    fired_at: str
    spark: str
    trend: list[str]
    heights: list[int]
    queue_link: str
    group_link: str


def _item(n: Notification, links: Links) -> _Item:
    kind, o = Kind(n.rule.kind), n.observation
    unit = UNITS[kind]
    where = "/".join(p for p in (o.queue, o.group) if p) or "broker"
    if kind in GROUP_KINDS and not o.group:  # rules.unread: a queue nobody reads
        where += " (no consumer group)"
    title = f"{n.notice.value.upper()} {kind.value} {where}"
    # No parentheses: Python's header folding would then break the Subject right after "Subject:".
    limit = "threshold" if n.notice is not Notice.RESOLVED else "back under"
    value = _number(o.value)
    if kind is Kind.TIME_TO_CLEAR and o.value >= NEVER:  # the lag has not fallen for the rule's window
        value = f"never (the lag has not fallen for {_number(n.rule.window_seconds)} s)"
    headline = (f"{DESCRIPTIONS[kind]}: {value}{'' if value.startswith('never') else ' ' + unit}, "
                f"{limit} {_number(n.rule.threshold)} {unit}")
    if o.paused and kind in GROUP_KINDS:  # lag that grows because someone paused the group
        title += " (paused)"
        headline = f"group paused, not stalled: {headline}"
    steps = buckets(n.trend, n.at_ms)
    known = [v for v in steps if v is not None]
    top = max(known, default=0) or 1
    return _Item(
        title=title, headline=headline, notice=n.notice.value, kind=kind.value, rule_id=n.rule.id,
        queue=o.queue, group=o.group, value=_number(o.value), threshold=_number(n.rule.threshold),
        lag=f"{o.lag:,}", lag_seconds=f"{o.lag_seconds:,.1f}", consumers=o.consumers,
        fired_at=_when(n.fired_at_ms), spark=sparkline(known),
        trend=["" if v is None else f"{v:,}" for v in steps],
        heights=[0 if v is None else max(1, round(v / top * 40)) for v in steps],
        queue_link=links.queue(o.queue) if o.queue else links.storage,
        group_link=links.queue(o.queue) if o.group else "",  # the queue page shows its groups
    )


_TEXT = """\
{% for i in items %}
{{ i.title }}
  {{ i.headline }}
{% if i.queue %}  queue: {{ i.queue }}{% if i.group %}   group: {{ i.group }}{% endif %}

{% endif %}
  lag: {{ i.lag }} messages, oldest unacked {{ i.lag_seconds }} s, consumers online: {{ i.consumers }}
{% if i.fired_at %}  firing since: {{ i.fired_at }}
{% endif %}
{% if i.spark %}  lag over the last hour: {{ i.spark }}  ({{ i.trend | select | join(" → ") }})
{% endif %}
  {{ i.queue_link }}

{% endfor %}
All alerts: {{ alerts_link }}
"""
_HTML = """\
<!doctype html>
<html><body style="font-family: sans-serif; font-size: 14px">
{% for i in items %}
<h3 style="margin-bottom: 4px; color: {{ '#b00020' if i.notice != 'resolved' else '#1b5e20' }}">{{ i.title }}</h3>
<p style="margin-top: 0">{{ i.headline }}</p>
<table cellpadding="3" style="border-collapse: collapse">
{% if i.queue %}<tr><th align="left">queue</th><td><a href="{{ i.queue_link }}">{{ i.queue }}</a></td></tr>{% endif %}
{% if i.group %}<tr><th align="left">group</th><td><a href="{{ i.group_link }}">{{ i.group }}</a></td></tr>{% endif %}
<tr><th align="left">lag</th><td>{{ i.lag }} messages</td></tr>
<tr><th align="left">oldest unacked</th><td>{{ i.lag_seconds }} s</td></tr>
<tr><th align="left">consumers online</th><td>{{ i.consumers }}</td></tr>
{% if i.fired_at %}<tr><th align="left">firing since</th><td>{{ i.fired_at }}</td></tr>{% endif %}
<tr><th align="left">rule</th><td>{{ i.rule_id }} ({{ i.kind }} &ge; {{ i.threshold }})</td></tr>
</table>
{% if i.spark %}
<p style="margin-bottom: 2px">Lag over the last hour (5-minute steps):</p>
<table cellspacing="1" style="border-collapse: separate"><tr style="vertical-align: bottom">
{% for h in i.heights %}
<td style="width: 14px"><div style="height: {{ h }}px; background: #5c6bc0"></div></td>{% endfor %}
</tr><tr style="font-size: 10px">{% for v in i.trend %}<td>{{ v }}</td>{% endfor %}</tr></table>
{% endif %}
{% endfor %}
<p><a href="{{ alerts_link }}">All alerts</a></p>
</body></html>
"""


@functools.cache
def _templates() -> tuple[Template, Template]:
    """The text and HTML templates, made by the first mail: Jinja2 is not imported at start."""
    from jinja2 import Environment

    text = Environment(autoescape=False, trim_blocks=True, lstrip_blocks=True).from_string(_TEXT)
    return text, Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True).from_string(_HTML)


def compose(notifications: Sequence[Notification], settings: Settings, recipients: Sequence[str],
            message_id: str | None = None) -> EmailMessage:
    """One mail about `notifications`: a single alert, or a digest of many."""
    links = Links(settings.console_base_url)
    items = [_item(n, links) for n in notifications]
    if len(items) == 1:
        subject = f"[chunkmq] {items[0].title}: {items[0].headline}"
    else:
        counts = {notice: sum(1 for n in notifications if n.notice is notice) for notice in Notice}
        parts = [f"{count} {notice.value}" for notice, count in counts.items() if count]
        subject = f"[chunkmq] {len(items)} alerts: {', '.join(parts)}"
    msg = EmailMessage()
    msg["Subject"] = subject
    msg["From"] = settings.smtp_from
    msg["To"] = ", ".join(recipients)
    msg["Date"] = datetime.now(UTC)
    msg["Message-ID"] = message_id or make_msgid(domain="chunkmq")
    text, html = _templates()
    msg.set_content(text.render(items=items, alerts_link=links.alerts))
    msg.add_alternative(html.render(items=items, alerts_link=links.alerts), subtype="html")
    return msg


async def send(message: EmailMessage, settings: Settings) -> str:
    """Deliver `message`; returns the server's answer with its code ("250 2.0.0 queued"). MailError
    on any failure."""
    import aiosmtplib  # loaded by the first mail, not at start
    from aiosmtplib import SMTPStatus

    password = settings.smtp_password.get_secret_value()
    recipients = [a.strip() for a in str(message["To"]).split(",") if a.strip()]
    try:
        errors, answer = await aiosmtplib.send(
            message.as_bytes(policy=_WIRE),
            sender=str(message["From"]),
            recipients=recipients,
            hostname=settings.smtp_host,
            port=settings.smtp_port,
            username=settings.smtp_user or None,
            password=password or None,
            use_tls=settings.smtp_tls,
            start_tls=settings.smtp_starttls,
            timeout=settings.smtp_timeout_seconds,
        )
    except aiosmtplib.SMTPResponseException as e:
        raise MailError(f"{e.code} {e.message}") from e
    except (TimeoutError, aiosmtplib.SMTPException, OSError, ssl.SSLError) as e:
        raise MailError(f"{type(e).__name__}: {e}") from e
    # aiosmtplib gives the text of the reply to DATA only: it raises on any code but 250.
    answer = f"{int(SMTPStatus.completed)} {answer}"
    if errors:  # some recipients refused, the others accepted
        refused = "; ".join(f"{who}: {r.code} {r.message}" for who, r in errors.items())
        return f"{answer} (refused: {refused})"
    return answer
