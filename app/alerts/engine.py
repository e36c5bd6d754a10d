"""The alert engine: every few seconds, measure every enabled rule on the read model, step each
alert's state machine, keep states, transitions and the mails to send in SQLite, and hand the mails
to the outbox.

A round looks only at the queues whose figures may have moved: those that changed since the previous
round (RestingViews.start_round), those with an alert pending or firing (its `for` duration, its
reminders and its resolution run on time), and those *due*. A value that grows with time on a queue
that does not change (the age of the oldest unacked message, the seconds since the ack floor moved or
since a consumer was seen, while messages wait) reaches its threshold at a time known when it is
measured: the queue is due then (a heap). The other values do not move while the queue does not. The
first round, and the first after the rules changed, looks at every queue.

Runs on the event loop (the views read in-memory broker state) as one of the app's background jobs;
its SQL goes through worker threads. Rules are re-read at each evaluation, so a rule changed with
`chunkmq alerts` straight in the database takes effect without a restart. States are loaded at
start, so an alert that was firing before a restart is still firing and does not mail again.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from dataclasses import dataclass, replace

from chunkmq.alerts.mail import Notification
from chunkmq.alerts.outbox import Outbox
from chunkmq.alerts.rules import GROUP_KINDS, GROWING, UNREAD, Kind, Observation, measure, unread
from chunkmq.alerts.state import Alert, Notice, State
from chunkmq.alerts.trend import HOUR_MS, Watch
from chunkmq.broker import views
from chunkmq.broker.broker import Broker
from chunkmq.broker.resting import RestingViews
from chunkmq.meta.alerts import AlertRepository, AlertRuleRow, AlertStateRow, NewAlertEvent, NewOutboxMail

log = logging.getLogger("chunkmq.alerts")

Key = tuple[int, str, str]
YIELD_EVERY = 200  # queues or alerts between two yields to the event loop


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class AlertView:
    """A current (not OK) alert, for the API, the console's overview and the metrics."""

    rule_id: int
    kind: str
    queue: str
    group: str
    state: str
    value: float
    threshold: float
    since_ms: int
    fired_at_ms: int | None


@dataclass(frozen=True, slots=True)
class _QueueRef:
    """A queue as the history finds its series: by id."""

    id: int


def _row(a: Alert) -> AlertStateRow:
    return AlertStateRow(a.rule_id, a.queue, a.group, a.state.value, a.value, a.since_ms, a.breach_since_ms,
                         a.clear_since_ms, a.fired_at_ms, a.notified_at_ms)


def _alert(r: AlertStateRow) -> Alert:
    return Alert(r.rule_id, r.queue, r.group, State(r.state), r.value, r.since_ms, r.breach_since_ms,
                 r.clear_since_ms, r.fired_at_ms, r.notified_at_ms)


def _mark(a: Alert) -> tuple[object, ...]:
    """What is worth writing down about an alert: everything but its latest value."""
    return (a.state, a.since_ms, a.breach_since_ms, a.clear_since_ms, a.fired_at_ms, a.notified_at_ms)


class AlertEngine:
    def __init__(self, broker: Broker, repo: AlertRepository, outbox: Outbox) -> None:
        self.broker = broker
        self.keep_ms = int(broker.settings.alert_history_days * 86_400_000)
        self._pruned_at = 0
        self.repo = repo
        self.outbox = outbox
        self.watch = Watch()
        self.resting = RestingViews(broker, "alerts")
        self.rules: dict[int, AlertRuleRow] = {}
        self.alerts: dict[Key, Alert] = {}
        self._saved: dict[Key, tuple[object, ...]] = {}  # _mark() of each state as last written
        self._signature: tuple[tuple[int, object], ...] | None = None  # the enabled rules of the last round
        self._due: dict[int, int] = {}  # queue id -> when a growing value of it reaches a threshold
        self._heap: list[tuple[int, int]] = []  # (due, queue id); entries not in _due are stale
        self._names: dict[int, str] = {}  # queue id -> name, of the queues looked at (to forget them)
        self.looked = 0  # queue views measured since start (the rest were not looked at)
        self._lock = asyncio.Lock()

    async def load(self) -> None:
        """Pick up the states kept by the previous run."""
        rows = await asyncio.to_thread(self.repo.load_states)
        self.rules = {r.id: r for r in await asyncio.to_thread(self.repo.list_rules)}
        self.alerts = {(r.rule_id, r.queue, r.group): _alert(r) for r in rows}
        self._saved = {k: _mark(a) for k, a in self.alerts.items()}

    async def evaluate(self, at_ms: int | None = None) -> None:
        """One evaluation of every rule (the background job calls this every few seconds)."""
        async with self._lock:  # the job and a test or API call never interleave
            rules = await asyncio.to_thread(self.repo.list_rules)
            now = now_ms() if at_ms is None else at_ms
            changed = {r.id for r in rules if r.id in self.rules and self.rules[r.id].updated_at != r.updated_at}
            if changed:  # a replaced rule starts afresh (its stored states were dropped with the change)
                self.alerts = {k: a for k, a in self.alerts.items() if k[0] not in changed}
                self._saved = {k: r for k, r in self._saved.items() if k[0] not in changed}
            enabled = [r for r in rules if r.enabled]
            signature = tuple((r.id, r.updated_at) for r in enabled)
            every = signature != self._signature  # the first round, or the rules changed
            self._signature = signature
            # Only what the enabled rules need: the overview walks the store's files for its disk numbers.
            queues = await self._queue_views(every, now) if any(r.kind != Kind.DISK for r in enabled) else []
            overview = views.overview(self.broker) if any(r.kind == Kind.DISK for r in enabled) else None
            self.watch.observe(queues, now)
            events: list[NewAlertEvent] = []
            notes: list[Notification] = []
            seen: dict[Key, Alert] = {}
            due: dict[str, int] = {}  # queue name -> when a growing value of it reaches a threshold
            for rule in enabled:
                kind = Kind(rule.kind)
                for obs in measure(rule, queues, overview, self.broker.history.floor_moved_at, self.watch, now):
                    key = (rule.id, obs.queue, obs.group)
                    alert = self.alerts.get(key) or Alert(rule.id, obs.queue, obs.group, since_ms=now)
                    transitions, notice = alert.step(obs.value, rule.threshold, int(rule.for_seconds * 1000),
                                                     int(rule.renotify_seconds * 1000), now)
                    events.extend(self._transition(rule, obs, old, new, now) for old, new in transitions)
                    notice = self._mailable(notice, rule, alert, now)
                    if notice is not None:
                        notes.append(await self._notification(notice, rule, alert, obs, now))
                    seen[key] = alert
                    if kind in GROWING and obs.lag > 0 and alert.state in (State.OK, State.RESOLVED):
                        # the value grows a second per second from now on, while the queue does not change
                        at = now + max(1, round((rule.threshold - obs.value) * 1000))
                        due[obs.queue] = min(at, due.get(obs.queue, at))
                    elif kind is Kind.TIME_TO_CLEAR and obs.lag > 0 and alert.state in (State.OK, State.RESOLVED):
                        # a lag that stops moving reaches the rule's window without its queue changing
                        at = now + max(1, round(rule.window_seconds * 1000))
                        due[obs.queue] = min(at, due.get(obs.queue, at))
                    if len(seen) % YIELD_EVERY == 0:
                        await asyncio.sleep(0)
            self._schedule(queues, due)
            by_id = {r.id: r for r in rules}
            looked = {q.name for q in queues}
            kept: dict[Key, Alert] = {}
            for key, alert in self.alerts.items():
                rule = by_id.get(key[0])
                if key in seen or rule is None or not rule.enabled:
                    continue  # a rule deleted or disabled takes its alerts along, without mail
                if alert.queue not in looked and views.has_queue(self.broker, alert.queue):
                    kept[key] = alert  # its queue was not looked at this round: nothing moved
                    continue
                if alert.state is not State.FIRING:
                    continue
                # What it watched is gone (queue or group deleted, or a queue got its first group): it is over.
                obs = Observation(alert.queue, alert.group, 0.0)
                read = (alert.group == UNREAD and Kind(rule.kind) in GROUP_KINDS
                        and views.has_queue(self.broker, alert.queue))
                why = "the queue has a consumer group now" if read else "the queue or group is gone"
                for old, new in alert.resolve(now):
                    events.append(self._transition(rule, obs, old, new, now, why))
                notes.append(await self._notification(Notice.RESOLVED, rule, alert, obs, now))
            self.rules = by_id
            self.alerts = kept | {k: a for k, a in seen.items() if a.state is not State.OK}
            letters = self.outbox.address(notes)
            ids = await self._persist(events, [x.row() for x in letters])
            self.outbox.put([replace(x, id=i) for x, i in zip(letters, ids, strict=True)])
            if now - self._pruned_at >= HOUR_MS:  # the history is kept CHUNKMQ_ALERT_HISTORY_DAYS
                self._pruned_at = now
                await asyncio.to_thread(self.repo.prune_events, now - self.keep_ms)

    def _mailable(self, notice: Notice | None, rule: AlertRuleRow, alert: Alert, now: int) -> Notice | None:
        """The notice to mail about `alert` after its step. An alert that fired (or reminded) while
        it could not be mailed (no SMTP host, no recipients) keeps no `notified_at_ms`, and is mailed
        once, as firing, at the first evaluation that can: after SMTP is configured and the broker
        restarted. Its mail then goes through the outbox with the others, as one digest."""
        can = self.outbox.can_mail(rule)
        if notice is None and alert.state is State.FIRING and alert.notified_at_ms is None and can:
            alert.notified_at_ms = now
            return Notice.FIRING
        if notice is not None and notice is not Notice.RESOLVED and not can:
            alert.notified_at_ms = None
        return notice

    async def _queue_views(self, every: bool, now: int) -> list[views.QueueView]:
        """The read model of the queues to look at this round (every queue if `every`), built in
        slices: with thousands of queues the event loop still serves publishes and pulls in between.
        A queue without consumer groups gets the group "" that has read nothing, so the group kinds
        see a queue filling up with nobody reading."""
        resting = self.resting
        changed = resting.start_round()  # a view is built again only where something changed (resting.py)
        for queue_id in [q for q in changed or () if q in self._names and resting.view_of(q, now) is None]:
            self.watch.forget(self._names.pop(queue_id))  # deleted
            self._due.pop(queue_id, None)
        if every or changed is None:
            ids = set(resting.queue_ids())
            self._due.clear()
            self._heap.clear()
        else:
            ids = changed | self._pending_or_firing()
            while self._heap and self._heap[0][0] <= now:
                at, queue_id = heapq.heappop(self._heap)
                if self._due.get(queue_id) == at:
                    del self._due[queue_id]
                    ids.add(queue_id)
        out: list[views.QueueView] = []
        for i, queue_id in enumerate(ids, 1):
            view = resting.view_of(queue_id, now)
            if view is not None:  # not deleted while we yielded
                if not view.groups:  # watched as the reader nobody is (rules.unread)
                    view = replace(view, groups=(unread(view, views.oldest_timestamp(self.broker, view), now),))
                self._names[view.id] = view.name
                out.append(view)
            if i % YIELD_EVERY == 0:
                await asyncio.sleep(0)
        self.looked += len(out)
        out.sort(key=lambda v: v.name)  # alerts, events and digests in the order of the queues' names
        return out

    def _pending_or_firing(self) -> set[int]:
        """The ids of the queues with an alert pending or firing: looked at every round."""
        ids = (self.resting.queue_id(a.queue) for a in self.alerts.values()
               if a.state in (State.PENDING, State.FIRING))
        return {i for i in ids if i is not None}

    def _schedule(self, queues: list[views.QueueView], due: dict[str, int]) -> None:
        """Note when each queue looked at is due again (a growing value reaching a threshold), if ever."""
        for view in queues:
            at = due.get(view.name)
            if at is None:
                self._due.pop(view.id, None)
            elif self._due.get(view.id) != at:
                self._due[view.id] = at
                heapq.heappush(self._heap, (at, view.id))

    async def _persist(self, events: list[NewAlertEvent], mails: list[NewOutboxMail]) -> list[int]:
        """Write the states that changed (a new value alone is not a change), the events, and the
        mails into the outbox, in one transaction; returns the mails' outbox ids."""
        marks = {k: _mark(a) for k, a in self.alerts.items()}
        changed = [_row(self.alerts[k]) for k, m in marks.items() if self._saved.get(k) != m]
        gone = [k for k in self._saved if k not in marks]
        if not (changed or gone or events or mails):
            return []
        ids = await asyncio.to_thread(self.repo.save, changed, gone, events, mails)
        self._saved = marks
        return ids

    @staticmethod
    def _transition(rule: AlertRuleRow, obs: Observation, old: State, new: State, now: int,
                    detail: str = "") -> NewAlertEvent:
        return NewAlertEvent(now, "transition", new.value, old.value, rule.id, rule.kind, obs.queue, obs.group,
                             obs.value, rule.threshold, detail)

    async def _notification(self, notice: Notice, rule: AlertRuleRow, alert: Alert, obs: Observation,
                            now: int) -> Notification:
        """The notice with the group's lag over the last hour, from the broker's history (reminders:
        what the history holds in memory, so a storm of reminders runs no SQL)."""
        trend: tuple[tuple[int, int, float], ...] = ()
        queue_id = self.resting.queue_id(obs.queue) if obs.group else None
        queue = _QueueRef(queue_id) if queue_id is not None else None  # its id is all the history needs
        if queue is not None:
            try:
                if notice is Notice.REMINDER:
                    points = self.broker.history.group_points(obs.queue, obs.group, now - HOUR_MS)
                else:
                    points = (await self.broker.history.group_series(queue, obs.group, now - HOUR_MS, None)).points
                trend = tuple((p.t, int(p.lag), p.lag_seconds) for p in points)
            except Exception:  # a mail without its chart is better than no mail
                log.exception("could not read the history of %s/%s", obs.queue, obs.group)
        return Notification(notice, rule, obs, now, alert.fired_at_ms, trend)

    # --- reading --------------------------------------------------------------------------------

    def current(self, state: State | None = None) -> list[AlertView]:
        """Alerts that are not OK (or only those in `state`), firing first, then by rule."""
        out = []
        for a in self.alerts.values():
            rule = self.rules.get(a.rule_id)
            if rule is None or (state is not None and a.state is not state):
                continue
            out.append(AlertView(a.rule_id, rule.kind, a.queue, a.group, a.state.value, a.value, rule.threshold,
                                 a.since_ms, a.fired_at_ms))
        return sorted(out, key=lambda v: (v.state != State.FIRING, v.rule_id, v.queue, v.group))

    def firing(self) -> list[AlertView]:
        """The firing alerts (the console's overview shows these)."""
        return self.current(State.FIRING)
