"""What both stages of `chunkmq serve`'s start (app/start.py) and the full app (app/main.py) share:
the settings check, the app's state, the log and GC set-up and the readiness answer. Below both, so
that the full app never imports the start that loads it."""

from __future__ import annotations

import gc
import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chunkmq.broker.broker import Broker
    from chunkmq.config import Settings


class ConfigError(RuntimeError):
    """Raised when the settings are unsafe or inconsistent."""


def check_settings(settings: Settings) -> None:
    if settings.auth not in ("on", "off"):
        raise ConfigError("CHUNKMQ_AUTH must be on or off")
    if settings.auth == "off" and settings.host != "127.0.0.1":
        raise ConfigError("CHUNKMQ_AUTH=off is refused unless the server binds to 127.0.0.1")


def check_tier(settings: Settings) -> None:
    """With CHUNKMQ_TIER_URL set: the URL is valid, its bucket exists (created if missing) and the
    credentials may write and delete in it; ConfigError naming the URL and what was refused."""
    if not settings.tier_url:
        return
    from chunkmq.broker.tier import location
    from chunkmq.storage.tier import Bucket, TierError

    try:
        loc = location(settings)
        assert loc is not None
        Bucket(loc).ensure()
    except (ValueError, TierError) as exc:
        raise ConfigError(str(exc)) from None


class AppState:
    """The app's state (`app.state`: settings, broker, auth, ...) as plain attributes, in place of
    Starlette's State: reading one through State's __getattr__ cost about 0.8 us, three or four times
    per hot request, and a restart's first stage loads no more of Starlette than its types."""

    if TYPE_CHECKING:  # any attribute, as with Starlette's State

        def __getattr__(self, name: str) -> Any: ...

        def __setattr__(self, name: str, value: Any) -> None: ...


def configure_logging(level: str) -> None:
    """Send chunkmq's own log lines (storage recovery, idempotency window, retention) to stderr at the
    configured level: uvicorn configures only its own loggers, so these were dropped below WARNING."""
    logger = logging.getLogger("chunkmq")
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
    number = logging.getLevelName(level.upper())
    logger.setLevel(number if isinstance(number, int) else logging.INFO)


def tune_gc() -> None:
    """Every publish and pull allocates thousands of short-lived dicts and lists; with CPython's
    default thresholds the cyclic GC then runs full collections over everything the broker holds,
    which measured as 3x slower publishing (60k vs 204k msgs/s in-process, bench/http_publish.py).
    Our hot paths create no reference cycles, so: freeze what start-up built, collect rarely.
    A server's first stage freezes without a collection: it leaves a few dozen unreachable objects,
    and a full pass over what it built would delay the first answer. A later call (the second stage,
    another app in the same process: tests, benchmarks) collects first, or the cycles left before
    would be frozen for good."""
    if gc.get_freeze_count():
        gc.collect()
    gc.freeze()
    gc.set_threshold(100_000, 50, 100)
    gc.enable()  # `chunkmq serve` starts with it off (app/cli.py)


def readiness(broker: Broker | None) -> tuple[int, dict[str, str]]:
    """GET /readyz's status and body, in either stage."""
    if broker is None:
        return 503, {"status": "starting"}
    reason = broker.disk.refusal()  # views.refusal, without loading the views
    if reason is not None:  # publishes are refused (507) or would be at the next chunk
        return 503, {"status": "storage_full", "reason": reason}
    return 200, {"status": "ready"}
