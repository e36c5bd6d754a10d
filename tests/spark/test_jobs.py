"""app/spark/jobs.py: the `chunkmq spark` command line parses its flags, and a job that fails on its
input ends as one line on stderr and exit status 1, before any Spark session starts."""

from __future__ import annotations

import argparse
from pathlib import Path

import httpx
import pytest

from chunkmq.spark import jobs
from tests.server import ServerProcess


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="chunkmq")
    jobs.add_parser(parser.add_subparsers(dest="command", required=True))
    return parser


def test_archive_flags_and_their_defaults() -> None:
    args = _parser().parse_args(["spark", "archive", "--output", "o", "--checkpoint", "c", "--queues", "a,b"])
    assert (args.job, args.queues, args.pattern, args.group, args.once, args.starting_offsets, args.master) == (
        "archive", "a,b", None, "archive", False, "earliest", None)


@pytest.mark.parametrize("argv", [
    ["spark", "archive", "--output", "o", "--checkpoint", "c"],  # neither --queues nor --pattern
    ["spark", "archive", "--output", "o", "--checkpoint", "c", "--queues", "a", "--pattern", "a.*"],
    ["spark", "report", "--queues", "a"],  # --output is required
    ["spark", "inspect"],  # --data-dir is required
    ["spark"],  # a job is required
])
def test_wrong_flags_are_refused_by_argparse(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        _parser().parse_args(argv)
    assert exited.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_inspecting_an_empty_data_directory_is_one_line_and_status_1(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    args = _parser().parse_args(["spark", "inspect", "--data-dir", str(tmp_path)])
    assert args.func(args) == 1
    assert capsys.readouterr().err == f"chunkmq spark: no chunk files under {tmp_path}\n"


def test_archiving_a_missing_queue_names_it_and_reads_the_token_from_the_environment(
    broker: ServerProcess, name: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHUNKMQ_TOKEN", "from-the-environment")
    args = _parser().parse_args(["spark", "archive", "--url", broker.url, "--queues", f"{name}-missing",
                                 "--output", "o", "--checkpoint", "c"])
    assert args.func(args) == 1
    assert args.token == "from-the-environment"
    err = capsys.readouterr().err
    assert err.startswith("chunkmq spark: ") and f"{name}-missing" in err and err.count("\n") == 1


def test_source_options_of_the_broker_flags(broker: ServerProcess, name: str) -> None:
    httpx.put(f"{broker.url}/api/v1/queues/{name}").raise_for_status()
    by_name = _parser().parse_args(["spark", "report", "--url", broker.url, "--queues", name, "--output", "o"])
    assert jobs.source_options(by_name) == {"url": broker.url, "subscribe": name}
    by_pattern = _parser().parse_args(["spark", "report", "--url", broker.url, "--pattern", f"{name}.*",
                                       "--token", "t", "--output", "o"])
    assert jobs.source_options(by_pattern) == {"url": broker.url, "token": "t", "subscribePattern": f"{name}.*"}
