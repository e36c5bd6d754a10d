"""The `chunkmq` command: `chunkmq serve`, `chunkmq token create`, `chunkmq definitions export`, ..."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:  # imported when a command runs: with the client alone installed, main() says what is missing
    from chunkmq.config import Settings


class CliError(Exception):
    """A command cannot go on: main() prints the message on one line and exits 1."""


def _settings_from(args: argparse.Namespace) -> Settings:
    from chunkmq.config import Settings

    overrides = {k: v for k, v in vars(args).items() if k in Settings.model_fields and v is not None}
    return Settings(**overrides)


def _serve(args: argparse.Namespace) -> int:
    import gc

    # No cyclic collections while the start imports and builds (it makes next to no garbage, and the
    # passes over its growing heap were a tenth of the imports' time): tune_gc turns them back on.
    gc.disable()
    from chunkmq.http.server import uvicorn_options, uvicorn_server

    config_class, server_class = uvicorn_server()
    from uvicorn.config import STARTUP_FAILURE

    from chunkmq.boot import ConfigError, check_settings, check_tier
    from chunkmq.start import serving_app
    from chunkmq.storage.lock import DirectoryLock, DirectoryLocked

    settings = _settings_from(args)
    os.umask(0o077)  # whatever the server or a library creates (SQLite's journals too) is owner-only
    try:
        check_settings(settings)
        check_tier(settings)
    except ConfigError as exc:
        print(f"chunkmq: {exc}", file=sys.stderr)
        return 2
    try:  # before anything in the directory is read, recovered or created
        lock = DirectoryLock.acquire(settings.data_dir)
    except DirectoryLocked as exc:
        print(f"chunkmq: {exc}", file=sys.stderr)
        return 1
    app = serving_app(settings)  # in two stages (app/start.py)
    app.state.dir_lock = lock  # type: ignore[attr-defined]
    from chunkmq.broker import blob
    from chunkmq.storage import record
    from chunkmq.wire import batch

    for what, module in (("record codec", record), ("wire batch codec", batch), ("blob parser", blob)):
        logging.getLogger("chunkmq").info("%s: %s", what, module.IMPLEMENTATION)
    server = server_class(config_class(app, **uvicorn_options(settings)))  # as uvicorn.run(app, ...)
    with contextlib.suppress(KeyboardInterrupt):
        server.run()
    return 0 if server.started else STARTUP_FAILURE


# --- chunkmq token ... (metadata / auth) --------------------------------------------------------

if TYPE_CHECKING:  # imported lazily at run time: `chunkmq serve` need not load the metadata layer
    import httpx

    from chunkmq.meta import MetaStore
    from chunkmq.meta.alerts import AlertRepository


def _token_store(args: argparse.Namespace) -> MetaStore:
    """A store on the metadata database of the broker whose data directory `serve` would use (the
    same flags and CHUNKMQ_* variables), migrations applied. A directory or database no broker has
    started on is refused: a token or user written there would be one no server knows."""
    from sqlalchemy.engine import make_url

    from chunkmq.meta import MetaStore, upgrade
    from chunkmq.meta.migrate import current_revision

    settings = _settings_from(args)
    url = make_url(settings.meta_url)
    if url.get_backend_name() == "sqlite" and url.database and not Path(url.database).is_file():
        if settings.database_url:
            raise CliError(f"no broker database at {url.database}: check --database-url or CHUNKMQ_DATABASE_URL")
        raise CliError(f"no broker data in {settings.data_dir.resolve()}: give the broker's --data-dir "
                       "(or set CHUNKMQ_DATA_DIR), or start `chunkmq serve` there first")
    if current_revision(settings.meta_url) is None:
        raise CliError(f"{url.render_as_string(hide_password=True)} holds no broker metadata: "
                       "start `chunkmq serve` on it first")
    upgrade(settings.meta_url)
    return MetaStore(settings.meta_url)


def _answer(exc: Exception) -> int:
    """An error as the API answers it (app/api/errors.py, the one error map), on stderr: its message
    and code. The exit status is 1 for a missing entity, 2 for anything else."""
    from chunkmq.api.errors import api_error

    error = api_error(exc)
    _failures.append(error.code)
    print(f"chunkmq: {error.message} ({error.code})", file=sys.stderr)
    return 1 if error.status == 404 else 2


_failures: list[str] = []  # the codes `_answer` printed: the audit log's result of the command


def _audit(args: argparse.Namespace, status: int) -> None:
    """Record a command that changed the metadata database itself (`audit`, set by its parser) in
    the audit log: by the OS user, from "local". One sent to a server (--url) is recorded there."""
    action = getattr(args, "audit", None)
    if action is None or getattr(args, "url", None):
        return
    import getpass

    from chunkmq.broker.audit import OK, AuditLog
    from chunkmq.meta import MetaStore
    from chunkmq.meta.audit import AuditRepository

    result = OK if status == 0 else (_failures[-1] if _failures else "failed")
    resource = str(next((getattr(args, f) for f in ("name", "id") if getattr(args, f, None) is not None), ""))
    with MetaStore(_settings_from(args).meta_url) as meta:
        AuditLog(AuditRepository(meta)).record_now("cli", getpass.getuser(), "local", action, resource, result)


def _token_create(args: argparse.Namespace) -> int:
    from chunkmq.meta import MetaError

    with _token_store(args) as meta:
        try:
            row, plain = meta.create_token(
                args.name, is_admin=args.admin, configure=args.configure, write=args.write, read=args.read
            )
        except MetaError as e:
            return _answer(e)
    # The token alone on stdout (scripts capture it); the rest on stderr.
    print(plain)
    print(f"created token {row.id} {row.name!r} ({row.prefix}...); it is shown only now", file=sys.stderr)
    return 0


def _token_list(args: argparse.Namespace) -> int:
    with _token_store(args) as meta:
        tokens = meta.list_tokens()
    _print_table(("id", "name", "prefix", "admin", "configure", "write", "read", "created", "last used"), [
        (str(t.id), t.name, t.prefix + "...", "yes" if t.is_admin else "", t.configure, t.write, t.read,
         f"{t.created_at:%Y-%m-%d %H:%M}", f"{t.last_used_at:%Y-%m-%d %H:%M}" if t.last_used_at else "")
        for t in tokens])
    return 0


def _token_delete(args: argparse.Namespace) -> int:
    from chunkmq.meta import MetaError

    with _token_store(args) as meta:
        try:
            meta.delete_token(args.id)
        except MetaError as e:
            return _answer(e)
    print(f"deleted token {args.id}", file=sys.stderr)
    return 0


DATA_DIR_HELP = "the broker's data directory (default $CHUNKMQ_DATA_DIR, else ./data)"


def _where_parser() -> argparse.ArgumentParser:
    """--data-dir and --database-url: where the metadata database of a command that works on it is."""
    where = argparse.ArgumentParser(add_help=False)
    where.add_argument("--data-dir", dest="data_dir", help=DATA_DIR_HELP)
    where.add_argument("--database-url", dest="database_url",
                       help="SQLAlchemy URL of the metadata (default $CHUNKMQ_DATABASE_URL, else <data-dir>/meta.db)")
    return where


def _add_token_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    where = _where_parser()

    token = sub.add_parser("token", help="manage API tokens")
    actions = token.add_subparsers(dest="action", required=True)
    create = actions.add_parser("create", parents=[where], help="create a token and print it (once)")
    create.add_argument("--name", required=True, help="what the token is for (shown in lists and the console)")
    create.add_argument("--admin", action="store_true", help="allowed everything")
    for action in ("configure", "write", "read"):
        create.add_argument(f"--{action}", default="", metavar="RE", help=f"regex of names to {action} (default: none)")
    create.set_defaults(func=_token_create, audit="token.create")
    actions.add_parser("list", parents=[where], help="list tokens").set_defaults(func=_token_list)
    delete = actions.add_parser("delete", parents=[where], help="delete a token")
    delete.add_argument("id", type=int)
    delete.set_defaults(func=_token_delete, audit="token.delete")


# --- chunkmq definitions ... (over HTTP: the running server owns the data) ------------------------


def _api(args: argparse.Namespace) -> httpx.Client:
    import httpx

    from chunkmq.config import ClientSettings, Settings

    client = ClientSettings()
    url = args.url or client.url
    token = args.token or client.token
    if not token:  # on the broker's own machine: the first admin token it wrote
        path = Path(args.data_dir or Settings().data_dir) / "admin-token"
        token = path.read_text().strip() if path.exists() else ""
    headers = {"authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=url, headers=headers, timeout=60)


def _call(args: argparse.Namespace, method: str, path: str, body: bytes | None = None) -> Any:
    """One API call; an error answer or an unreachable server is printed and ends the command."""
    import httpx
    import orjson

    try:
        with _api(args) as api:
            response = api.request(method, path, content=body, headers={"content-type": "application/json"})
    except httpx.HTTPError as e:
        raise SystemExit(f"chunkmq: cannot reach the server: {e}") from None
    if response.status_code >= 400:
        try:
            error = response.json()["error"]
            message = f"{error['message']} ({error['code']})"
        except (ValueError, KeyError, TypeError):
            message = response.text
        raise SystemExit(f"chunkmq: {response.status_code}: {message}")
    return orjson.loads(response.content) if response.content else None


def _definitions_export(args: argparse.Namespace) -> int:
    import orjson

    data = orjson.dumps(_call(args, "GET", "/api/v1/definitions"), option=orjson.OPT_INDENT_2) + b"\n"
    if args.file:
        Path(args.file).write_bytes(data)
        print(f"definitions written to {args.file}", file=sys.stderr)
    else:
        sys.stdout.buffer.write(data)
    return 0


def _definitions_import(args: argparse.Namespace) -> int:
    import orjson
    from rich.console import Console
    from rich.table import Table

    try:
        raw = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    except OSError as e:
        raise CliError(f"cannot read {args.file}: {e.strerror}") from None
    result = _call(args, "POST", "/api/v1/definitions", raw)
    table = Table("section", "created", "unchanged")
    for section, created in result["created"].items():
        table.add_row(section, str(created), str(result["unchanged"].get(section, 0)))
    Console(stderr=True).print(table)
    if result["tokens"]:  # secrets of the tokens created: on stdout, like `chunkmq token create`
        print(orjson.dumps(result["tokens"], option=orjson.OPT_INDENT_2).decode())
    return 0


def _add_definitions_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    server = argparse.ArgumentParser(add_help=False)
    server.add_argument("--url", help="the server (default $CHUNKMQ_URL or http://127.0.0.1:8000)")
    server.add_argument("--token", help="an admin token (default $CHUNKMQ_TOKEN, else <data-dir>/admin-token)")
    server.add_argument("--data-dir", dest="data_dir", help="where to find <data-dir>/admin-token (default "
                        "$CHUNKMQ_DATA_DIR, else ./data)")

    definitions = sub.add_parser("definitions",
                                 help="export or import exchanges, queues, bindings, groups, permissions")
    actions = definitions.add_subparsers(dest="action", required=True)
    export = actions.add_parser("export", parents=[server], help="print the definitions as JSON")
    export.add_argument("--file", help="write them to this file instead")
    export.set_defaults(func=_definitions_export)
    imp = actions.add_parser("import", parents=[server], help="import definitions (checked whole first)")
    imp.add_argument("file", help="a JSON file, or - for standard input")
    imp.set_defaults(func=_definitions_import)
# --- chunkmq user ... (console users) -----------------------------------------------------------


def _read_password(args: argparse.Namespace) -> str:
    """From --password-stdin (scripts) or asked twice on the terminal; never from a flag (ps shows it)."""
    if args.password_stdin:
        return sys.stdin.readline().rstrip("\n")
    import getpass

    first = getpass.getpass("password: ")
    if first != getpass.getpass("again: "):
        raise ValueError("the passwords differ")
    return first


def _user_create(args: argparse.Namespace) -> int:
    from chunkmq.meta import MetaError

    try:
        password = _read_password(args)
        with _token_store(args) as meta:
            meta.create_user(args.name, password, is_admin=not args.read_only)
    except MetaError as e:
        return _answer(e)
    except ValueError as e:  # the two passwords differ
        print(f"chunkmq: {e}", file=sys.stderr)
        return 2
    print(f"created console user {args.name!r}", file=sys.stderr)
    return 0


def _user_passwd(args: argparse.Namespace) -> int:
    from chunkmq.meta import MetaError

    try:
        password = _read_password(args)
        with _token_store(args) as meta:
            meta.set_password(args.name, password)
    except MetaError as e:
        return _answer(e)
    except ValueError as e:  # the two passwords differ
        print(f"chunkmq: {e}", file=sys.stderr)
        return 2
    print(f"changed the password of {args.name!r} (sessions end at the server's next restart)", file=sys.stderr)
    return 0


def _user_list(args: argparse.Namespace) -> int:
    with _token_store(args) as meta:
        users = meta.list_users()
    _print_table(("id", "name", "role", "created"),
                 [(str(u.id), u.name, "admin" if u.is_admin else "read-only", f"{u.created_at:%Y-%m-%d %H:%M}")
                  for u in users])
    return 0


def _print_table(columns: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    """A table on stdout; piped, as wide as it needs (not squeezed into 80 columns)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(*columns)
    for row in rows:
        table.add_row(*map(Text, row))  # Text, not markup: a name may hold [brackets]
    console = Console()
    if not console.is_terminal:
        console = Console(width=250)
    console.print(table)


def _user_delete(args: argparse.Namespace) -> int:
    from chunkmq.meta import MetaError

    with _token_store(args) as meta:
        try:
            meta.delete_user(args.name)
        except MetaError as e:
            return _answer(e)
    print(f"deleted console user {args.name!r}", file=sys.stderr)
    return 0


def _user_unlock(args: argparse.Namespace) -> int:
    from chunkmq.web.session import request_unlock

    settings = _settings_from(args)
    with _token_store(args) as meta:
        if args.name not in {u.name for u in meta.list_users()}:
            print(f"chunkmq: no user {args.name!r}", file=sys.stderr)
            return 1
    request_unlock(settings.data_dir, args.name)
    print(f"unlocked console user {args.name!r}: the server lets them log in at their next try", file=sys.stderr)
    return 0


def _add_user_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    where = _where_parser()
    secret = argparse.ArgumentParser(add_help=False)
    secret.add_argument("--password-stdin", action="store_true", help="read the password from standard input")

    user = sub.add_parser("user", help="manage console users")
    actions = user.add_subparsers(dest="action", required=True)
    create = actions.add_parser("create", parents=[where, secret], help="create a console user")
    create.add_argument("name")
    create.add_argument("--read-only", action="store_true", help="may look but not act")
    create.set_defaults(func=_user_create, audit="user.create")
    passwd = actions.add_parser("passwd", parents=[where, secret], help="set a user's password")
    passwd.add_argument("name")
    passwd.set_defaults(func=_user_passwd, audit="user.password")
    actions.add_parser("list", parents=[where], help="list console users").set_defaults(func=_user_list)
    delete = actions.add_parser("delete", parents=[where], help="delete a console user")
    delete.add_argument("name")
    delete.set_defaults(func=_user_delete, audit="user.delete")
    unlock = actions.add_parser("unlock", parents=[where], help="end a user's lock after failed logins")
    unlock.add_argument("name")
    unlock.set_defaults(func=_user_unlock, audit="user.unlock")


# --- chunkmq alerts ... (alert rules) ------------------------------------------------------------

_RULE_COLUMNS = ("id", "kind", "queue", "group", "threshold", "for_seconds", "renotify_seconds", "window_seconds",
                 "recipients", "enabled")


def _rule_body(args: argparse.Namespace) -> dict[str, object]:
    return {"kind": args.kind, "queue": args.queue, "group": args.group, "threshold": args.threshold,
            "for_seconds": args.for_seconds, "renotify_seconds": args.renotify_seconds,
            "window_seconds": args.window_seconds, "recipients": args.to or [], "enabled": not args.disabled}


def _alerts_call(args: argparse.Namespace, method: str, path: str, body: object = None) -> Any:
    """Over HTTP (with --url): the running server validates and applies the change."""
    import orjson

    return _call(args, method, f"/api/v1/alerts{path}", None if body is None else orjson.dumps(body))


@contextlib.contextmanager
def _alert_repository(args: argparse.Namespace) -> Iterator[AlertRepository]:
    """Straight on the metadata database (SQLite is shared safely with a running server, which
    reads the rules again at every evaluation)."""
    from chunkmq.meta.alerts import AlertRepository

    with _token_store(args) as meta:
        yield AlertRepository(meta)


def _alerts_list(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    if args.url:
        rules = list(_alerts_call(args, "GET", "/rules"))  # type: ignore[arg-type]
    else:
        from dataclasses import asdict

        with _alert_repository(args) as repo:
            rules = [asdict(r) for r in repo.list_rules()]
    table = Table(*_RULE_COLUMNS)
    for r in rules:
        cells = [", ".join(r[c]) if c == "recipients" else ("yes" if r[c] else "no") if c == "enabled" else str(r[c])
                 for c in _RULE_COLUMNS]
        table.add_row(*map(Text, cells))
    console = Console()
    if not console.is_terminal:
        console = Console(width=250)
    console.print(table)
    return 0


def _alerts_add(args: argparse.Namespace) -> int:
    body = _rule_body(args)
    if args.url:
        path = f"/rules/{args.id}" if args.id else "/rules"
        rule = _alerts_call(args, "PUT" if args.id else "POST", path, body)
        rule_id = rule["id"]  # type: ignore[index]
    else:
        from chunkmq.meta import MetaError

        try:
            with _alert_repository(args) as repo:
                row, _ = repo.put_rule(args.id, **body)
        except MetaError as e:
            return _answer(e)
        rule_id = row.id
    print(rule_id)
    print(f"saved alert rule {rule_id} ({args.kind} >= {args.threshold:g})", file=sys.stderr)
    return 0


def _alerts_delete(args: argparse.Namespace) -> int:
    if args.url:
        _alerts_call(args, "DELETE", f"/rules/{args.id}")
    else:
        from chunkmq.meta import MetaError

        try:
            with _alert_repository(args) as repo:
                repo.delete_rule(args.id)
        except MetaError as e:
            return _answer(e)
    print(f"deleted alert rule {args.id}", file=sys.stderr)
    return 0


def _add_alerts_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from chunkmq.meta.alert_kinds import ALERT_KINDS

    where = _where_parser()
    where.add_argument("--url", help="a running server (http://host:port): go through its API instead")
    where.add_argument("--token", help="an admin token for --url (default $CHUNKMQ_TOKEN, else <data-dir>/admin-token)")

    alerts = sub.add_parser("alerts", help="manage alert rules")
    actions = alerts.add_subparsers(dest="action", required=True)
    actions.add_parser("list", parents=[where], help="list alert rules").set_defaults(func=_alerts_list)
    add = actions.add_parser("add", parents=[where], help="add an alert rule (or replace rule --id)")
    add.add_argument("--id", type=int, help="replace this rule (or create it with this id)")
    add.add_argument("--kind", required=True, choices=ALERT_KINDS)
    add.add_argument("--threshold", required=True, type=float)
    add.add_argument("--queue", default="*", help="glob over queue names (default *)")
    add.add_argument("--group", default="*", help="glob over group names (default *)")
    add.add_argument("--for", dest="for_seconds", type=float, default=0.0, metavar="SECONDS",
                     help="how long the condition must hold before it fires")
    add.add_argument("--renotify", dest="renotify_seconds", type=float, default=3600.0, metavar="SECONDS",
                     help="reminder interval while firing; 0 = once (default 3600)")
    add.add_argument("--window", dest="window_seconds", type=float, default=300.0, metavar="SECONDS",
                     help="dead_letters: the window counted (default 300)")
    add.add_argument("--to", action="append", metavar="ADDRESS", help="recipient (repeatable; default CHUNKMQ_SMTP_TO)")
    add.add_argument("--disabled", action="store_true")
    add.set_defaults(func=_alerts_add, audit="alert_rule.put")
    delete = actions.add_parser("delete", parents=[where], help="delete an alert rule")
    delete.add_argument("id", type=int)
    delete.set_defaults(func=_alerts_delete, audit="alert_rule.delete")

# --- chunkmq audit (the audit log) ---------------------------------------------------------------


def _audit_list(args: argparse.Namespace) -> int:
    import asyncio
    import datetime as dt

    from chunkmq.broker.audit import AuditLog
    from chunkmq.broker.errors import InvalidInput
    from chunkmq.meta.audit import AuditRepository
    from chunkmq.web.forms import utc_ms

    if not 1 <= args.limit <= 10_000:
        raise CliError("--limit must be between 1 and 10000")
    try:
        since = utc_ms(args.since) if args.since else None
        until = utc_ms(args.until) if args.until else None
    except InvalidInput as e:  # the time's format
        raise CliError(str(e)) from None
    with _token_store(args) as meta:
        rows = asyncio.run(AuditLog(AuditRepository(meta)).entries(
            who=args.who, action=args.action, since_ms=since, until_ms=until, before_id=args.before,
            limit=args.limit))
    _print_table(("id", "when (UTC)", "source", "who", "address", "action", "resource", "result"), [
        (str(e.id), dt.datetime.fromtimestamp(e.at_ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S"), e.source,
         e.who, e.address, e.action, e.resource, e.result) for e in rows])
    return 0


def _add_audit_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    audit = sub.add_parser("audit", parents=[_where_parser()], help="show the audit log, newest first")
    audit.add_argument("--who", help="a token name or user, exactly")
    audit.add_argument("--action", help="an action (queue.purge) or its object (queue)")
    audit.add_argument("--since", help="from this time (YYYY-MM-DDTHH:MM[:SS] UTC, or epoch ms)")
    audit.add_argument("--until", help="before this time (as --since)")
    audit.add_argument("--limit", type=int, default=50, help="at most this many entries (default 50)")
    audit.add_argument("--before", type=int, help="entries older than this id (the last one shown)")
    audit.set_defaults(func=_audit_list)


class _Parser(argparse.ArgumentParser):
    """A usage error is one line too (argparse prints the whole usage first), pointing to --help."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _add_serve_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from chunkmq.config import FsyncSetting

    serve = sub.add_parser("serve", help="run the broker", description="Run the broker. Every other setting is "
                           "a CHUNKMQ_* environment variable (README.md, Configuration).")
    serve.add_argument("--host", help="the address to listen on (default $CHUNKMQ_HOST, else 127.0.0.1)")
    serve.add_argument("--port", type=int, help="the port to listen on (default $CHUNKMQ_PORT, else 8000)")
    serve.add_argument("--data-dir", dest="data_dir", help=f"{DATA_DIR_HELP}; created on the first start")
    serve.add_argument("--fsync", choices=[m.value for m in FsyncSetting],
                       help="always: answer a publish after its fsync; interval: fsync every "
                            "$CHUNKMQ_FSYNC_INTERVAL_MS; never: leave it to the OS "
                            "(default $CHUNKMQ_FSYNC, else interval)")
    serve.set_defaults(func=_serve)


def _add_spark_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from chunkmq.spark.jobs import add_parser  # argparse only: no PySpark import

    add_parser(sub)


def _tier_verify(args: argparse.Namespace) -> int:
    from chunkmq.broker.tier import location, verify
    from chunkmq.meta import MetaStore
    from chunkmq.meta.tier import TierManifest
    from chunkmq.storage.tier import Bucket

    settings = _settings_from(args)
    loc = location(settings)
    if loc is None:
        print("chunkmq: CHUNKMQ_TIER_URL is not set: there is no tier to verify", file=sys.stderr)
        return 2
    with MetaStore(settings.meta_url) as meta:
        report = verify(TierManifest(meta), Bucket(loc), sweep=args.sweep)
    for key in report.missing:
        print(f"missing: {key}")
    for key in report.extra:
        print(f"{'swept' if key in report.swept else 'extra'}: {key}")
    swept = f", {len(report.swept)} swept" if args.sweep else ""
    print(f"{loc.url}: {report.rows} chunks in the manifest, {report.objects} objects; "
          f"{len(report.missing)} missing, {len(report.extra)} extra{swept}")
    return 1 if report.missing else 0


def _add_tier_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    tier = sub.add_parser("tier", help="tiered storage (CHUNKMQ_TIER_URL)")
    actions = tier.add_subparsers(dest="action", required=True)
    check = actions.add_parser("verify", parents=[_where_parser()],
                               help="compare the manifest with the bucket: missing and extra objects")
    check.add_argument("--sweep", action="store_true", help="delete the extra objects (orphans)")
    check.set_defaults(func=_tier_verify)


_COMMANDS = {"serve": _add_serve_parser, "token": _add_token_parser, "definitions": _add_definitions_parser,
             "alerts": _add_alerts_parser, "spark": _add_spark_parser, "user": _add_user_parser,
             "audit": _add_audit_parser, "tier": _add_tier_parser}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of `command` alone: argparse looks for translations on disk for
    every parser it makes (about 30, a tenth of a restart's first stage), and a command line parses
    the same with its own command's parser."""
    parser = _Parser(prog="chunkmq", description=__doc__)
    parser.add_argument("--debug", action="store_true",
                        help="on an error, show its traceback too (also CHUNKMQ_DEBUG=1)")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, add in _COMMANDS.items():
        if command in (None, name):
            add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Every error is one line on stderr and a non-zero exit status; with `--debug` (or
    CHUNKMQ_DEBUG=1) its traceback comes first, for a bug report."""
    debug = os.environ.get("CHUNKMQ_DEBUG", "").strip().lower() in ("1", "true", "yes", "on")
    try:
        argv = sys.argv[1:] if argv is None else argv
        command = next((arg for arg in argv if not arg.startswith("-")), None)  # (--debug, --help come first)
        args = build_parser(command if command in _COMMANDS else None).parse_args(argv)
        debug = debug or args.debug
        status = int(args.func(args) or 0)
        _audit(args, status)
        return status
    except ModuleNotFoundError as e:
        if (e.name or "").partition(".")[0] == "chunkmq":
            raise
        # `pip install chunkmq` is the client alone: say which extra brings what is missing
        extra = "spark" if (e.name or "").partition(".")[0] in ("pyspark", "pandas") else "server"
        _traceback(e, debug)
        print(f"chunkmq: this command needs the {extra} extra (no module named {e.name!r}): "
              f"pip install 'chunkmq[{extra}]'", file=sys.stderr)
        return 2
    except CliError as e:
        _traceback(e, debug)
        print(f"chunkmq: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # a bug or an environment problem: still one line, with what it was
        _traceback(e, debug)
        message = str(e).strip().splitlines()[0] if str(e).strip() else ""
        print(f"chunkmq: {type(e).__name__}: {message}", file=sys.stderr)
        return 1


def _traceback(error: BaseException, debug: bool) -> None:
    if debug:
        import traceback

        traceback.print_exception(error, file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
