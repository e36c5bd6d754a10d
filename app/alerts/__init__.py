"""Backlog alerts by e-mail (docs/alerts.md).

    rules.py    a rule and what it measures on the broker's read model (app/broker/views.py)
    state.py    the state machine of one alert: OK -> PENDING -> FIRING -> RESOLVED, with hysteresis
    trend.py    what the views and the history do not keep: consumers last seen, dead letters over time
    engine.py   evaluates every rule every few seconds and keeps states and history in SQLite
    mail.py     composes the text + HTML mail and sends it with aiosmtplib
    outbox.py   keeps notices in SQLite until mailed, as digests sent in the background with retries
    jobs.py     the alerts of one running app: what its lifespan starts and stops, the test mail
    errors.py   the errors the alerts API answers with (in the broker's error tree)
"""
