"""app/config.py: settings come from CHUNKMQ_* variables, are checked, and derive the URLs and lists
the rest of the server reads."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from chunkmq.config import ClientSettings, DiskBudgetPolicy, FsyncSetting, Settings


def test_environment_variables_with_the_prefix_are_read_and_converted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHUNKMQ_FSYNC", "always")
    monkeypatch.setenv("CHUNKMQ_PORT", "9001")
    monkeypatch.setenv("CHUNKMQ_DISK_BUDGET_POLICY", "drop_oldest")
    monkeypatch.setenv("CHUNKMQ_METRICS_REQUIRE_TOKEN", "true")
    monkeypatch.setenv("CHUNKMQ_NOT_A_SETTING", "x")  # ignored, not an error
    monkeypatch.setenv("PORT", "1")  # without the prefix: not ours
    s = Settings()
    assert (s.fsync, s.port, s.disk_budget_policy, s.metrics_require_token) == (
        FsyncSetting.ALWAYS, 9001, DiskBudgetPolicy.DROP_OLDEST, True)
    assert Settings(port=9002).port == 9002  # arguments (the CLI's flags) win over the environment


@pytest.mark.parametrize(("field", "value"), [
    ("fsync", "sometimes"), ("fsync_interval_ms", 0), ("chunk_size", 4095), ("gc_threshold", 0.6),
    ("smtp_port", 70000), ("console_page_size", 1001), ("retention_interval_seconds", 0),
    ("console_session_idle_seconds", 59), ("max_headers", -1), ("audit_days", 0),
])
def test_values_out_of_range_are_refused_naming_the_field(field: str, value: object) -> None:
    with pytest.raises(ValidationError) as refused:
        Settings(**{field: value})
    assert [e["loc"] for e in refused.value.errors()] == [(field,)]


def test_the_console_url_defaults_to_host_and_port_without_a_trailing_slash() -> None:
    assert Settings(host="127.0.0.1", port=8123).console_base_url == "http://127.0.0.1:8123"
    assert Settings(console_url="https://mq.example.com/console/").console_base_url == "https://mq.example.com/console"


def test_smtp_recipients_are_split_on_commas_without_blanks() -> None:
    assert Settings(smtp_to=" a@x.org, ,b@y.org,").smtp_recipients == ("a@x.org", "b@y.org")
    assert Settings(smtp_to="").smtp_recipients == ()


def test_the_metadata_url_is_sqlite_in_the_data_directory_unless_given(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert Settings(data_dir=Path("rel")).meta_url == f"sqlite:///{tmp_path / 'rel' / 'meta.db'}"  # absolute
    url = "postgresql+psycopg://u@localhost/chunkmq"
    assert Settings(data_dir=Path("rel"), database_url=url).meta_url == url


def test_the_smtp_password_is_never_shown() -> None:
    s = Settings(smtp_password="hunter2-secret")
    assert "hunter2-secret" not in repr(s) and "hunter2-secret" not in str(s.model_dump())
    assert s.smtp_password.get_secret_value() == "hunter2-secret"


def test_client_settings_read_the_same_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHUNKMQ_URL", "http://10.0.0.5:8000")
    monkeypatch.setenv("CHUNKMQ_TOKEN", "t0ken")
    monkeypatch.setenv("CHUNKMQ_FSYNC", "never")  # a server setting: not the client's concern
    assert (ClientSettings().url, ClientSettings().token) == ("http://10.0.0.5:8000", "t0ken")


def test_the_audit_log_keeps_ninety_days_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().audit_days == 90
    monkeypatch.setenv("CHUNKMQ_AUDIT_DAYS", "7.5")
    assert Settings().audit_days == 7.5


def test_the_tier_reads_aws_variables_as_s3_tools_do(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().tier_url == "" and Settings().tier_region == "us-east-1"
    monkeypatch.setenv("CHUNKMQ_TIER_URL", "s3://b/p")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t-value")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    s = Settings()
    assert (s.tier_url, s.tier_endpoint, s.tier_access_key_id, s.tier_region) == (
        "s3://b/p", "http://127.0.0.1:9000", "key", "eu-west-1")
    assert s.tier_secret_access_key.get_secret_value() == "s3cr3t-value" and "s3cr3t" not in repr(s)
