"""All settings in one place: environment variables `CHUNKMQ_*`, overridable by CLI flags."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class FsyncSetting(StrEnum):
    ALWAYS = "always"
    INTERVAL = "interval"
    NEVER = "never"


class DiskBudgetPolicy(StrEnum):
    REJECT = "reject"  # at the budget, publishes get 507 storage_full; nothing unconsumed is deleted
    DROP_OLDEST = "drop_oldest"  # at the budget, retention deletes the oldest chunks, consumed or not


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CHUNKMQ_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = 8000
    data_dir: Path = Path("./data")
    # SQLAlchemy URL of the metadata database; empty means SQLite at <data_dir>/meta.db.
    database_url: str = ""
    fsync: FsyncSetting = FsyncSetting.INTERVAL
    fsync_interval_ms: int = Field(100, ge=1, le=60_000)
    chunk_size: int = Field(256 * 1024 * 1024, ge=4096)
    index_chunk_entries: int = Field(1_000_000, ge=16)
    max_message_bytes: int = Field(4 * 1024 * 1024, ge=1)
    max_batch_bytes: int = Field(64 * 1024 * 1024, ge=1)
    max_batch_messages: int = Field(10_000, ge=1)
    # What one message's headers may hold: entries, and UTF-8 bytes of names and values together.
    max_headers: int = Field(64, ge=0)
    max_header_bytes: int = Field(64 * 1024, ge=0)
    # "on" (default) or "off"; off is refused unless the server binds to 127.0.0.1.
    auth: str = "on"
    # /metrics is open, as Prometheus expects; true: it needs a valid token like /api/v1 (auth on).
    metrics_require_token: bool = False
    dedup_window_seconds: int = Field(120, ge=0)
    # How often the keys added to the idempotency window are written to disk (data/dedup/): after a
    # kill -9 the restart loads them and scans only the log written since (docs/decisions.md).
    dedup_snapshot_seconds: float = Field(1.0, gt=0)
    # Retention when a queue has no limits of its own, and the last safety net for the disk.
    default_max_age_seconds: int = Field(7 * 24 * 3600, ge=0)
    # Cap on everything under data_dir (chunks, indexes, checkpoint, dedup snapshots, meta.db and its
    # WAL), by allocated blocks; 0 = no budget. The policy says what happens at the cap.
    disk_budget_bytes: int = Field(0, ge=0)
    disk_budget_policy: DiskBudgetPolicy = DiskBudgetPolicy.REJECT
    retention_interval_seconds: float = Field(5.0, gt=0)
    # The storage collector rewrites a sealed chunk once its live share (bytes some queue still
    # needs / chunk_size) falls below this, after retention; 0 turns it off (docs/storage.md).
    gc_threshold: float = Field(0.5, ge=0, le=0.5)
    # Tiered storage (docs/storage.md "Tiered storage"): sealed chunks are uploaded to
    # s3://bucket/prefix; empty: no tiering. The endpoint and credentials are read as S3 tools read
    # them (AWS_*). tier_local_bytes: local bytes that chunks already in the bucket may keep (past
    # it the oldest leave the disk, and are fetched back when read); 0: keep them all.
    tier_url: str = ""
    tier_endpoint: str = Field("", validation_alias=AliasChoices("AWS_ENDPOINT_URL", "tier_endpoint"))
    tier_access_key_id: str = Field("", validation_alias=AliasChoices("AWS_ACCESS_KEY_ID", "tier_access_key_id"))
    tier_secret_access_key: SecretStr = Field(
        SecretStr(""), validation_alias=AliasChoices("AWS_SECRET_ACCESS_KEY", "tier_secret_access_key"))
    tier_region: str = Field("us-east-1", validation_alias=AliasChoices("AWS_REGION", "tier_region"))
    tier_local_bytes: int = Field(0, ge=0)
    # WebSocket heartbeat (uvicorn's protocol pings): a peer that does not answer a ping within the
    # timeout is dropped, so a dead consumer stops holding credit and its in-flight messages time out.
    ws_ping_interval: float = Field(20.0, gt=0)
    ws_ping_timeout: float = Field(20.0, gt=0)
    # A server-sent event stream (app/api/events.py) with nothing to send writes a comment this often,
    # so that proxies do not close it as idle.
    sse_heartbeat_seconds: float = Field(15.0, gt=0)
    # History of queue and group metrics (charts, the history API, alert trends), app/broker/history.py:
    # a sample every interval, kept at that resolution for history_fine_seconds (the newest
    # history_memory_seconds of it also in memory), and as one point per history_coarse_step_seconds
    # for history_coarse_seconds; written to the metadata database every history_flush_seconds.
    history_interval_seconds: float = Field(5.0, gt=0)
    history_memory_seconds: float = Field(900.0, gt=0)
    history_fine_seconds: float = Field(3600.0, gt=0)
    history_coarse_step_seconds: float = Field(60.0, gt=0)
    history_coarse_seconds: float = Field(7 * 24 * 3600.0, gt=0)
    history_flush_seconds: float = Field(10.0, gt=0)
    # A connection must send a request's headers within this time (slowloris); see docs/api.md.
    request_header_timeout_seconds: float = Field(10.0, gt=0)
    # Open connections (HTTP and WebSocket) past which a request is answered 503.
    max_connections: int = Field(4096, ge=1)
    # The reverse proxies whose X-Forwarded-For / -Proto are believed (comma-separated addresses or
    # networks, "*" for any); empty: none, the peer's own address counts (the console's login limit).
    forwarded_allow_ips: str = ""
    log_level: str = "info"
    # Web apps on these origins (comma-separated, as a browser sends them: https://app.example:8443)
    # may call /api/v1 (CORS, app/api/cors.py); empty: no CORS headers, cross-origin pages are refused.
    cors_origins: str = ""
    # The access log (at INFO): "notable" writes a line for every request except the hot routes'
    # (publish, pull) successful answers quicker than access_log_slow_seconds, which /metrics counts
    # (app/http/access_log.py); "all" writes a line for every request.
    access_log: Literal["notable", "all"] = "notable"
    access_log_slow_seconds: float = Field(1.0, ge=0)
    # Console (app/web): idle sessions end after this; the pages poll their numbers this often.
    # Failed logins (web/session.py LoginLimiter): after `attempts` in a row a user waits
    # `lock_seconds`, doubled after each further failure up to `max_lock_seconds`; an address that
    # failed for `address_names` user names within the window is refused until they age out.
    console_session_idle_seconds: int = Field(8 * 3600, ge=60)
    console_login_attempts: int = Field(5, ge=1)
    console_login_window_seconds: int = Field(300, ge=1)
    console_login_lock_seconds: int = Field(30, ge=1)
    console_login_max_lock_seconds: int = Field(900, ge=1)
    console_login_address_names: int = Field(10, ge=2)
    console_refresh_seconds: float = Field(2.0, gt=0)
    console_page_size: int = Field(50, ge=1, le=1000)
    # A group with lag whose ack floor has not moved for this long is flagged stalled.
    console_stalled_seconds: float = Field(60.0, gt=0)

    # Alerts (app/alerts, docs/alerts.md). Evaluation runs off the publish and pull paths.
    alert_interval_seconds: float = Field(5.0, gt=0)
    # Alerts that fire or resolve within this window after the first one go out as one digest mail.
    alert_digest_seconds: float = Field(10.0, ge=0)
    # Alert history (transitions and mails) older than this is deleted.
    alert_history_days: float = Field(30.0, gt=0)
    # The audit log (app/broker/audit.py) keeps its entries this many days; older ones are pruned hourly.
    audit_days: float = Field(90.0, gt=0)
    # Base of the console links in mails; empty: http://<host>:<port>.
    console_url: str = ""
    # SMTP: nothing is sent while smtp_host is empty. The password is read here and never shown back.
    smtp_host: str = ""
    smtp_port: int = Field(25, ge=1, le=65535)
    smtp_starttls: bool = False  # upgrade a plain connection with STARTTLS
    smtp_tls: bool = False  # TLS from the first byte (usually port 465)
    smtp_user: str = ""
    smtp_password: SecretStr = SecretStr("")
    smtp_from: str = "chunkmq@localhost"
    smtp_to: str = ""  # default recipients, comma-separated
    smtp_timeout_seconds: float = Field(10.0, gt=0)
    # A failed mail is tried again after smtp_retry_seconds, doubling up to 5 minutes, smtp_attempts in all.
    smtp_retry_seconds: float = Field(5.0, gt=0)
    smtp_attempts: int = Field(6, ge=1)

    @property
    def cors_allowed(self) -> frozenset[str]:
        """CHUNKMQ_CORS_ORIGINS as a set, each origin without a trailing slash."""
        return frozenset(o.strip().rstrip("/") for o in self.cors_origins.split(",") if o.strip())

    @property
    def console_base_url(self) -> str:
        return (self.console_url or f"http://{self.host}:{self.port}").rstrip("/")

    @property
    def smtp_recipients(self) -> tuple[str, ...]:
        return tuple(a.strip() for a in self.smtp_to.split(",") if a.strip())

    @property
    def meta_url(self) -> str:
        return self.database_url or f"sqlite:///{(self.data_dir / 'meta.db').resolve()}"


class ClientSettings(BaseSettings):
    """What `chunkmq` commands that talk to a running server use (`chunkmq definitions ...`)."""

    model_config = SettingsConfigDict(env_prefix="CHUNKMQ_", extra="ignore")

    url: str = "http://127.0.0.1:8000"
    token: str = ""  # a bearer token; with none, the one in <data_dir>/admin-token is tried
