"""app/boot.py: the settings check, the log set-up, the GC tuning and the readiness answer."""

from __future__ import annotations

import gc
import logging
from pathlib import Path

import pytest

from chunkmq.boot import AppState, ConfigError, check_settings, configure_logging, readiness, tune_gc
from chunkmq.broker.broker import Broker
from chunkmq.config import Settings
from tests.broker.conftest import with_broker


def test_auth_off_is_refused_unless_the_server_binds_to_loopback(tmp_path: Path) -> None:
    check_settings(Settings(data_dir=tmp_path, auth="off", host="127.0.0.1"))
    check_settings(Settings(data_dir=tmp_path, auth="on", host="0.0.0.0"))
    with pytest.raises(ConfigError, match=r"127\.0\.0\.1"):
        check_settings(Settings(data_dir=tmp_path, auth="off", host="0.0.0.0"))


def test_the_app_state_holds_plain_attributes() -> None:
    state = AppState()
    state.broker = None
    assert vars(state) == {"broker": None}


def test_chunkmq_s_log_lines_go_out_at_the_configured_level() -> None:
    logger = logging.getLogger("chunkmq")
    before = (logger.level, list(logger.handlers))
    try:
        configure_logging("warning")
        assert logger.level == logging.WARNING
        handlers = list(logger.handlers)
        configure_logging("debug")  # a second call changes the level and adds no second handler
        assert logger.level == logging.DEBUG and logger.handlers == handlers
        configure_logging("no-such-level")
        assert logger.level == logging.INFO
    finally:
        logger.setLevel(before[0])
        logger.handlers[:] = before[1]


def test_tune_gc_freezes_what_was_built_and_collects_rarely() -> None:
    before = gc.get_threshold()
    try:
        tune_gc()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == (100_000, 50, 100)
        assert gc.isenabled()
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_readiness_is_starting_without_a_broker_and_ready_with_one(tmp_path: Path) -> None:
    assert readiness(None) == (503, {"status": "starting"})

    async def ready(broker: Broker) -> tuple[int, dict[str, str]]:
        return readiness(broker)

    assert with_broker(tmp_path, ready) == (200, {"status": "ready"})
