"""What an alert rule watches (app/alerts/rules.py). A module of its own, below the models and the
rows, so that the CLI's parser names the kinds without loading SQLAlchemy."""

ALERT_KINDS = ("lag_messages", "lag_seconds", "stalled", "no_consumers", "dead_letters", "queue_full", "disk",
               "time_to_clear")
