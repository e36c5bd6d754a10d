"""The `chunkmq` command: `chunkmq serve`, `chunkmq token create`, ..."""

from __future__ import annotations

import argparse
import sys

from app.config import FsyncSetting, Settings


def _settings_from(args: argparse.Namespace) -> Settings:
    overrides = {k: v for k, v in vars(args).items() if k in Settings.model_fields and v is not None}
    return Settings(**overrides)


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from app.main import create_app

    settings = _settings_from(args)
    app = create_app(settings)
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        http="httptools",
        ws="websockets",
        log_level=settings.log_level,
        timeout_graceful_shutdown=5,
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="chunkmq", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the broker")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument("--data-dir", dest="data_dir")
    serve.add_argument("--fsync", choices=[m.value for m in FsyncSetting])
    serve.set_defaults(func=_serve)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
