"""app/meta/__main__.py: `python -m chunkmq.meta upgrade [URL]` (the developers' command)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chunkmq.meta.__main__ import main
from chunkmq.meta.migrate import current_revision, head_revision


def test_upgrade_migrates_the_given_database_and_says_its_revision(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'given.db'}"
    assert main(["upgrade", url]) == 0
    assert capsys.readouterr().out == f"{url}: at revision {head_revision()}\n"
    assert current_revision(url) == head_revision()


def test_upgrade_without_a_url_takes_the_configured_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CHUNKMQ_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("CHUNKMQ_DATABASE_URL", raising=False)
    assert main(["upgrade"]) == 0
    url = f"sqlite:///{tmp_path / 'data' / 'meta.db'}"
    assert capsys.readouterr().out.startswith(f"{url}: at revision ")
    assert current_revision(url) == head_revision()


@pytest.mark.parametrize("argv", [[], ["downgrade"], ["revision"]])
def test_a_missing_or_unknown_command_is_a_usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2 and "usage: python -m chunkmq.meta" in capsys.readouterr().err
