"""app/config.py: settings from CHUNKMQ_* environment variables (in any case, read by pydantic-settings),
keyword arguments first, each value validated as its field's type."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from chunkmq.config import ClientSettings, FsyncSetting, Settings


def test_variables_keywords_and_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHUNKMQ_PORT", "9001")
    monkeypatch.setenv("chunkmq_fsync", "always")  # any case, as pydantic-settings reads them
    monkeypatch.setenv("CHUNKMQ_METRICS_REQUIRE_TOKEN", "true")
    monkeypatch.setenv("CHUNKMQ_SMTP_PASSWORD", "hunter2")
    monkeypatch.setenv("CHUNKMQ_URL", "http://broker:8000")
    monkeypatch.setenv("CHUNKMQ_NOT_A_SETTING", "x")  # ignored
    monkeypatch.setenv("OTHER_PORT", "1")
    settings = Settings(data_dir="/srv/chunkmq", unknown=1)
    assert (settings.port, settings.fsync, settings.metrics_require_token) == (9001, FsyncSetting.ALWAYS, True)
    assert settings.data_dir == Path("/srv/chunkmq") and settings.fsync_interval_ms == 100
    assert settings.smtp_password.get_secret_value() == "hunter2" and "hunter2" not in repr(settings)
    assert Settings(port=7000).port == 7000  # a keyword (a CLI flag) wins over the variable
    assert ClientSettings().url == "http://broker:8000"
    assert Settings(max_headers="7", fsync="never", gc_threshold=0).max_headers == 7  # converted as the variables are
    for text, value in (("yes", True), ("OFF", False), ("1", True), ("f", False)):
        monkeypatch.setenv("CHUNKMQ_SMTP_TLS", text)
        assert Settings().smtp_tls is value


@pytest.mark.parametrize(("name", "value", "says"), [
    ("CHUNKMQ_PORT", "eighty", "port\n  Input should be a valid integer"),
    ("CHUNKMQ_FSYNC_INTERVAL_MS", "0", "fsync_interval_ms\n  Input should be greater than or equal to 1"),
    ("CHUNKMQ_FSYNC", "sometimes", "fsync\n  Input should be 'always', 'interval' or 'never'"),
    ("CHUNKMQ_GC_THRESHOLD", "0.9", "gc_threshold\n  Input should be less than or equal to 0.5"),
    ("CHUNKMQ_METRICS_REQUIRE_TOKEN", "maybe", "metrics_require_token\n  Input should be a valid boolean"),
    ("CHUNKMQ_SMTP_ATTEMPTS", "2.5", "smtp_attempts\n  Input should be a valid integer"),
])
def test_a_bad_value_names_its_setting(monkeypatch: pytest.MonkeyPatch, name: str, value: str, says: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError) as refused:
        Settings()
    assert says in str(refused.value)
    monkeypatch.delenv(name)
    with pytest.raises(ValidationError, match="port"):
        Settings(port="x")  # keywords (CLI flags) are checked too
