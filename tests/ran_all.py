"""A pytest plugin: fail a run that reports success while fewer tests finished than were collected.

A lost pytest-xdist worker, or a crash between tests, must not pass quietly. Registered by
tests/conftest.py; the controller counts (or the only process, without workers).
"""

from __future__ import annotations

from typing import Any

import pytest


class RanAll:
    """Counts the collected tests and those that finished (passed, failed or skipped)."""

    def __init__(self) -> None:
        self.collected: int | None = None
        self.finished: set[str] = set()

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.collected = len(session.items)

    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self.collected = max(self.collected or 0, len(ids))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" or report.outcome != "passed":
            self.finished.add(report.nodeid)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if exitstatus == pytest.ExitCode.OK and self.collected and len(self.finished) < self.collected:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
            reporter = session.config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None:
                reporter.write_line(f"only {len(self.finished)} of {self.collected} collected tests ran", red=True)


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controller (or a run without workers) counts
        config.pluginmanager.register(RanAll(), "ran-all")
