"""A real SMTP server (aiosmtpd) on 127.0.0.1 that keeps what it receives, and can refuse on demand."""

from __future__ import annotations

import asyncio
import email
import email.policy
import threading
import time
from dataclasses import dataclass
from email.message import EmailMessage
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

from tests.server import free_port


@dataclass(frozen=True)
class Received:
    recipients: list[str]
    message: EmailMessage

    @property
    def subject(self) -> str:
        return str(self.message["Subject"])

    def part(self, subtype: str) -> str:
        body = self.message.get_body(preferencelist=(subtype,))
        assert body is not None, f"no text/{subtype} part"
        return str(body.get_content()).replace("\r\n", "\n")  # type: ignore[attr-defined]


class Mailbox:
    """The aiosmtpd handler; its methods are called from the controller's thread."""

    def __init__(self, login: tuple[str, str] | None = None) -> None:
        """With `login` (user, password), AUTH is offered (without TLS, on 127.0.0.1) and checked."""
        self._lock = threading.Lock()
        self._received: list[Received] = []
        self._refuse = 0
        self.logins: list[str] = []
        self._login = login
        self.port = free_port()
        auth: dict[str, Any] = {"authenticator": self._authenticate,
                                "auth_require_tls": False} if login else {}
        self.controller = Controller(self, hostname="127.0.0.1", port=self.port, **auth)

    def _authenticate(self, server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> AuthResult:
        ok = isinstance(data, LoginPassword) and (data.login.decode(), data.password.decode()) == self._login
        if ok:
            self.logins.append(data.login.decode())
        return AuthResult(success=ok)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        with self._lock:
            if self._refuse:
                self._refuse -= 1
                return "451 4.3.0 mailbox busy, try again later"
            message = email.message_from_bytes(envelope.content, policy=email.policy.default)
            self._received.append(Received(list(envelope.rcpt_tos), message))  # type: ignore[arg-type]
        return "250 2.0.0 queued"

    def refuse_next(self, n: int) -> None:
        with self._lock:
            self._refuse = n

    @property
    def received(self) -> list[Received]:
        with self._lock:
            return list(self._received)

    def wait_for(self, n: int, timeout: float = 15.0) -> list[Received]:
        """At least `n` mails (polling); fails after `timeout`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.received
            if len(got) >= n:
                return got
            time.sleep(0.02)
        raise AssertionError(f"expected {n} mail(s) within {timeout} s, got {len(self.received)}")

    async def arrived(self, n: int, timeout: float = 15.0) -> list[Received]:
        """wait_for from inside the event loop the app runs on (without blocking it)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.received
            if len(got) >= n:
                return got
            await asyncio.sleep(0.02)
        raise AssertionError(f"expected {n} mail(s) within {timeout} s, got {len(self.received)}")
