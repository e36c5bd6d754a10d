"""`chunkmq spark archive|report|inspect`: the command line of the ready Spark jobs.

Only argparse here: PySpark is imported when a job runs, so `chunkmq --help` stays fast and works
without the `spark` extra.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    spark = sub.add_parser("spark", help="Spark jobs: archive queues to Parquet, traffic reports, inspect chunk files")
    jobs = spark.add_subparsers(dest="job", required=True)

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--master", default=None, help="Spark master (default local[*]) or a Spark Connect URL (sc://...)")

    broker = argparse.ArgumentParser(add_help=False)
    broker.add_argument("--url", default="http://127.0.0.1:8000", help="the broker's base URL")
    broker.add_argument("--token", default=None, help="API token (default: $CHUNKMQ_TOKEN)")
    which = broker.add_mutually_exclusive_group(required=True)
    which.add_argument("--queues", help="comma-separated queue names")
    which.add_argument("--pattern", help="regular expression of queue names (new queues are picked up)")

    archive = jobs.add_parser("archive", parents=[common, broker],
                              help="copy queues to Parquet partitioned by date (Structured Streaming)")
    archive.add_argument("--output", required=True, help="directory of the Parquet archive")
    archive.add_argument("--checkpoint", required=True, help="Spark checkpoint directory (the job's position)")
    archive.add_argument("--once", action="store_true",
                         help="archive what is there now, then stop (Trigger.AvailableNow, for cron)")
    archive.add_argument("--group", default="archive",
                         help="consumer group moved to the archived position (console, lag alerts)")
    archive.add_argument("--max-per-trigger", type=int, default=None, help="at most this many messages per micro-batch")
    archive.add_argument("--interval", type=float, default=10.0, help="seconds between micro-batches when continuous")
    archive.add_argument("--starting-offsets", default="earliest", help="earliest, latest or JSON (first run only)")
    archive.set_defaults(func=_run("chunkmq.spark.archive"))

    report = jobs.add_parser("report", parents=[common, broker],
                             help="traffic report over the archive and the live queues (Parquet + HTML)")
    report.add_argument("--archive", default=None, help="Parquet archive written by `chunkmq spark archive`")
    report.add_argument("--output", required=True, help="directory for the report's Parquet tables and report.html")
    report.set_defaults(func=_run("chunkmq.spark.report"))

    inspect = jobs.add_parser("inspect", parents=[common],
                              help="read the chunk files of a data directory directly (read-only)")
    inspect.add_argument("--data-dir", required=True, help="the broker's data directory (or its store/ directory)")
    inspect.add_argument("--output", default=None, help="write every record as Parquet here")
    inspect.set_defaults(func=_run("chunkmq.spark.inspect"))


def _run(module: str) -> Callable[[argparse.Namespace], int]:
    """The entry point of a job module, imported only when the job runs."""

    def run(args: argparse.Namespace) -> int:
        import importlib
        import os

        if getattr(args, "token", None) is None and "token" in args:
            args.token = os.environ.get("CHUNKMQ_TOKEN")
        job = importlib.import_module(module)
        try:
            return int(job.main(args) or 0)
        except Exception as e:  # a job's failure is one line, not a JVM stack trace
            from chunkmq.spark.http import ChunkmqError
            from chunkmq.spark.options import OptionError

            if isinstance(e, ChunkmqError | OptionError | FileNotFoundError):
                print(f"chunkmq spark: {e}", file=sys.stderr)
                return 1
            raise

    return run


def source_options(args: argparse.Namespace) -> dict[str, str]:
    """The `format("chunkmq")` options of a job's broker flags, checked against the broker first (a
    missing queue is then one line, not an error wrapped by Spark)."""
    from chunkmq.spark.http import connect
    from chunkmq.spark.options import SourceOptions

    opts = {"url": args.url}
    if args.token:
        opts["token"] = args.token
    if args.queues:
        opts["subscribe"] = args.queues
    else:
        opts["subscribePattern"] = args.pattern
    with connect(args.url, args.token) as api:
        SourceOptions.parse(opts, streaming=False).queues(api)
    return opts
