"""app/meta/alert_kinds.py: the kinds an alert rule may watch, named below the models."""

from __future__ import annotations

import subprocess
import sys

from chunkmq.alerts.rules import Kind
from chunkmq.meta.alert_kinds import ALERT_KINDS


def test_the_kinds_are_the_ones_the_alert_rules_evaluate() -> None:
    assert len(set(ALERT_KINDS)) == len(ALERT_KINDS)
    assert set(ALERT_KINDS) == {k.value for k in Kind}


def test_naming_the_kinds_loads_no_sqlalchemy() -> None:
    """The CLI's parser lists the kinds without paying for SQLAlchemy's import."""
    code = ("import sys; from chunkmq.meta.alert_kinds import ALERT_KINDS; "
            "print(any(m.startswith('sqlalchemy') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
