"""Developer commands for the metadata database:

    python -m chunkmq.meta upgrade [URL]        apply every migration (default: the configured database)
    python -m chunkmq.meta revision "message"   write alembic/versions/NNNN_message.py from the difference
                                            between the models and the newest migration
"""

from __future__ import annotations

import argparse
import sys

from chunkmq.config import Settings
from chunkmq.meta.migrate import current_revision, new_revision, upgrade


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chunkmq.meta", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("upgrade", help="apply every migration")
    up.add_argument("url", nargs="?", default=Settings().meta_url)
    rev = sub.add_parser("revision", help="autogenerate the next migration from the models")
    rev.add_argument("message")
    args = parser.parse_args(argv)
    if args.command == "upgrade":
        upgrade(args.url)
        print(f"{args.url}: at revision {current_revision(args.url)}")
    else:
        print(f"wrote {new_revision(args.message)}; review it, then run the tests")
    return 0


if __name__ == "__main__":
    sys.exit(main())
