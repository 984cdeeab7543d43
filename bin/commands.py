"""`main(argv) -> int` for every command in bin/: argument parsing and exit codes only.

Exit codes shared by all commands: 0 done, 1 finished with errors (see output),
2 cannot reach PostgreSQL or bad configuration.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import psycopg

from bin import devenv
from pipeline import db, migrations, servers, settings as settings_mod
from pipeline.core.errors import ConfigError


def _tool() -> str:
    return f"bin/{Path(sys.argv[0]).name}"


def _settings(*, redis: bool = False):
    """The settings, or exit 2 with the reason: invalid, or DATABASE_URL (and, for a command that sends messages,
    REDIS_URL) not set."""
    try:
        cfg = settings_mod.load()
    except ConfigError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        raise SystemExit(2)
    for name, value in (("DATABASE_URL", cfg.database_url), ("REDIS_URL", cfg.redis_url if redis else "-")):
        if not value:
            print(f"{_tool()}: {devenv.missing(name, os.environ)}", file=sys.stderr)
            raise SystemExit(2)
    return cfg


def migrate_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bin/migrate", description="Apply missing schema migrations.")
    parser.add_argument("--check", action="store_true", help="only report; exit 1 when migrations are missing")
    args = parser.parse_args(argv)
    cfg = _settings()

    def work() -> int:
        if args.check:
            with servers.connect(cfg) as conn:
                todo = migrations.pending(conn)
            for m in todo:
                print(f"missing {m.version:04d}_{m.name}")
            return 1 if todo else 0
        applied = migrations.migrate(cfg.database_url, bounds=cfg)
        for m in applied:
            print(f"applied {m.version:04d}_{m.name}")
        if not applied:
            print("schema is current")
        return 0
    return _exit_code(work, refusals=(migrations.MigrationError,))


def _servers_usable(cfg, *, once: bool) -> bool:
    """PostgreSQL usable (waiting up to 30 s for it unless `once`), or False with why on stderr. Redis is not
    asked: the long-running loops ride out a Redis that is away (the workers and the web name an evicting one)."""
    try:
        servers.preflight(cfg, wait_seconds=0 if once else 30, redis_too=False,
                          say=lambda line: print(line, file=sys.stderr))
        return True
    except servers.ServerUnusable as exc:
        print(f"cannot use the servers: {exc}", file=sys.stderr)
    except Exception as exc:   # still unreachable after the wait: a psycopg connection error
        print(f"cannot reach the servers: {exc}", file=sys.stderr)
    return False


def _stop_flag():
    import signal
    import threading
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def batches_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bin/batches", description=(
        "The batch lane (IMAGE_BULK_BACKEND=batch): gather enlisted bulk image lines into OpenAI Batch API jobs, "
        "send, poll and record them. One batcher works at a time (a second waits as a standby); a reconcile run "
        "does the same when none does. With IMAGE_BULK_BACKEND=sync it only waits. Exit codes: 0 stopped (or "
        "--once done), 2 cannot reach PostgreSQL."))
    parser.add_argument("--once", action="store_true", help="one round, then exit")
    args = parser.parse_args(argv)
    cfg = _settings()
    from pipeline import batches, storage
    from pipeline.log import log
    if not _servers_usable(cfg, once=args.once):
        return 2
    stop = _stop_flag()
    lock_held = False
    while not stop.is_set():
        try:
            # the lock is held across transactions: a session (DATABASE_SESSION_URL)
            with servers.connect(cfg, session=True, autocommit=True) as conn:
                batcher = None
                while not stop.is_set():
                    if not lock_held:
                        lock_held = db.one(conn, "image_batches_try_lock")["locked"]
                    if lock_held and cfg.image_bulk_backend == "batch":
                        batcher = batcher or batches.Batcher(cfg, conn, batches.client_for(cfg),
                                                             storage.media_store(cfg), storage.receipt_book(cfg))
                        done = batcher.advance()
                        if any(done.values()):
                            log("batches_advanced", **done)
                    if args.once:
                        return 0
                    stop.wait(min(1.0, cfg.image_batch_poll_seconds, max(0.05, cfg.image_batch_gather_seconds)))
        except psycopg.OperationalError as exc:
            lock_held = False   # the session and its lock are gone with the connection
            if args.once:
                print(f"cannot reach PostgreSQL: {exc}", file=sys.stderr)
                return 2
            log("batcher_reconnecting", error=exc.__class__.__name__)
            stop.wait(1.0)
    return 0


def reconcile_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bin/reconcile", description=(
        "Recover what crashes and lost messages left behind. Exit codes: 0 done (or another run holds the "
        "lock, or the slot already had its run), 1 some actions failed (the others were applied), 2 cannot reach PostgreSQL."))
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--once", action="store_true", help="one run (the default)")
    mode.add_argument("--slot", action="store_true", help=(
        "the run of the current time slot (RECONCILE_SLOT_SECONDS), for cron: a second run of the same slot, on "
        "any machine, does nothing; the run records the slots missed before it"))
    mode.add_argument("--loop", type=float, metavar="SECONDS", help="run again every SECONDS (dev stack)")
    parser.add_argument("--batch", type=int, default=500, help="rows per transaction (default 500)")
    args = parser.parse_args(argv)
    cfg = _settings(redis=True)
    from pipeline.log import log
    from pipeline.executor import build_providers
    from pipeline.reconcile import Reconciler
    stop = _stop_flag()
    providers = build_providers(cfg)
    status = 0
    while True:
        try:
            # the run holds a session lock across its transactions: DATABASE_SESSION_URL when a pooler is in front
            with servers.connect(cfg, session=True) as conn:
                report = Reconciler(cfg, conn, providers, batch=args.batch).run(
                    cfg.reconcile_slot_seconds if args.slot else None)
        except servers.ServerUnusable as exc:
            print(f"cannot use PostgreSQL: {exc}", file=sys.stderr)
            return 2
        except psycopg.OperationalError as exc:
            print(f"cannot reach PostgreSQL: {exc}", file=sys.stderr)
            status = 2
        else:
            if not report.locked:
                print("another reconcile run holds the lock; nothing to do")
            elif report.slot_taken:
                print(f"the slot {report.slot.isoformat()} already had its run; nothing to do")
            elif args.loop is None or report.errors or any(report.counts.values()):
                log("reconcile_run", counts=report.counts, errors=report.errors, slot=report.slot,
                    missed_before=report.missed_before)
            status = 1 if report.errors else 0
        if args.loop is None or stop.wait(args.loop):
            return status


def dispatch_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bin/dispatch", description=(
        "Send due outbox rows to RQ: interactive rows at once, bulk rows as the bulk queues have room "
        "(BULK_QUEUE_DEPTH), and due webhook messages to the webhook queue. Exit codes: 0 stopped (or --once done), 2 cannot reach PostgreSQL."))
    parser.add_argument("--once", action="store_true", help="send what is due now, then exit")
    args = parser.parse_args(argv)
    cfg = _settings(redis=True)
    from pipeline import dispatch, tracing
    from pipeline.core import lanes
    tracing.setup(cfg.tracing, "mediapipe-dispatcher")   # docs/tracing.md; nothing is imported when off
    conn_redis = servers.redis_client(cfg)
    depth = lanes.bulk_depths(cfg)
    if not _servers_usable(cfg, once=args.once):
        return 2
    if args.once:
        try:
            # the bulk lane's lock is held from the queue lengths to the enqueue: a session (DATABASE_SESSION_URL)
            with servers.connect(cfg, session=True) as conn:
                total = 0
                while (sent := dispatch.send_due(conn, conn_redis, claim_seconds=cfg.dispatch_claim_seconds,
                                                 bulk_depth=depth, lost_seconds=cfg.lost_dispatch_seconds)):
                    total += sent
        except psycopg.OperationalError as exc:
            print(f"cannot reach PostgreSQL: {exc}", file=sys.stderr)
            return 2
        print(f"sent {total}")
        return 0
    stop = _stop_flag()
    try:
        dispatch.run_forever(lambda: servers.connect(cfg, session=True), conn_redis,
                             claim_seconds=cfg.dispatch_claim_seconds, should_stop=stop.is_set, bulk_depth=depth,
                             scan=_recovery_scan(cfg), scan_every=cfg.recovery_scan_seconds,
                             lost_seconds=cfg.lost_dispatch_seconds)
    except servers.ServerUnusable as exc:   # the server changed under us (a pooler put in front, say)
        print(f"cannot use PostgreSQL: {exc}", file=sys.stderr)
        return 2
    return 0


def _recovery_scan(cfg):
    """The reconciler's two cheap scans, for the dispatcher's loop; None when RECOVERY_SCAN_SECONDS is 0."""
    if not cfg.recovery_scan_seconds:
        return None
    from pipeline.executor import build_providers
    from pipeline.log import log
    from pipeline.reconcile import Reconciler
    providers = build_providers(cfg)
    made: dict = {}

    def scan(conn):
        if made.get("conn") is not conn:    # a new connection after a reconnect: a reconciler on it
            made.update(conn=conn, reconciler=Reconciler(cfg, conn, providers))
        report = made["reconciler"].scan()
        if report.errors or any(report.counts.values()):
            log("recovery_scan", counts=report.counts, errors=report.errors)
    return scan


def _on_database(cfg, work, *, refusals: tuple) -> int:
    """Run `work(conn)` on a connection, with `_exit_code`'s exit codes."""
    def connected() -> int:
        with servers.connect(cfg) as conn:
            work(conn)
        return 0
    return _exit_code(connected, refusals=refusals)


def _exit_code(work, *, refusals: tuple) -> int:
    """Run `work()` and turn its ends into the shared exit codes: its own (0 done), 1 one of `refusals`
    (printed), 2 PostgreSQL unusable or unreachable."""
    try:
        return work()
    except refusals as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return 1
    except servers.ServerUnusable as exc:
        print(f"cannot use PostgreSQL: {exc}", file=sys.stderr)
        return 2
    except psycopg.OperationalError as exc:
        print(f"cannot reach PostgreSQL: {exc}", file=sys.stderr)
        return 2


def keys_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bin/keys", description=(
        "Manage API keys. Exit codes: 0 done, 1 refused (unknown key id, bad owner or role), "
        "2 cannot reach PostgreSQL or bad configuration."))
    sub = parser.add_subparsers(dest="command", required=True)
    create = sub.add_parser("create", help="make a key and print it once (only its hash is stored)")
    create.add_argument("--owner", required=True, help="who holds the key; named in every recorded action")
    create.add_argument("--role", required=True, choices=("editor", "reviewer", "admin", "delivery"),
                        help="delivery: reads approved deliveries only (an integration that fetches bundles)")
    create.add_argument("--team", default="default", help=(
        "the team the key belongs to (made if new; default: 'default'): its contents are the only ones the key "
        "sees, except an admin's, which sees every team's"))
    create.add_argument("--same-person", action="store_true", help=(
        "the owner already holds a key of another role and this is meant (refused without it: the four-eyes "
        "rule compares people, so one person's editor and reviewer keys must be made knowingly)"))
    sub.add_parser("list", help="list keys by id (nothing of the keys themselves is stored)")
    sub.add_parser("teams", help="list the teams, with their live keys and contents")
    revoke = sub.add_parser("revoke", help="revoke a key by id; its UI sessions end at once")
    revoke.add_argument("key_id", type=int)
    revoke.add_argument("--cancel-pending", action="store_true", help=(
        "also cancel the work no worker has started of every version the key saved (recorded, and listed on "
        "the attention page as 'revoked'); calls already running finish"))
    args = parser.parse_args(argv)
    cfg = _settings()
    from pipeline import keys, teams
    from pipeline.core.errors import InvalidInput, NotFound
    from pipeline.core.principal import Principal
    def work(conn) -> None:
        if args.command == "create":
            info, token = keys.create(conn, args.owner, args.role, team=args.team, same_person=args.same_person)
            print(f"created key {info.id} for {info.owner} ({info.role}, team {info.team}); it is shown only now:")
            print(token)
        elif args.command == "list":
            for info in keys.list_keys(conn):
                state = f"revoked {info.revoked_at:%Y-%m-%d %H:%M}" if info.revoked_at else "live"
                print(f"{info.id:>5}  {info.role:<8}  {info.team:<16}  {info.owner}  "
                      f"created {info.created_at:%Y-%m-%d %H:%M}  {state}")
        elif args.command == "teams":
            for team in teams.list_teams(conn):
                print(f"{team['name']:<40}  {team['live_keys']:>4} live keys  {team['contents']:>6} contents")
        else:
            info = keys.revoke(conn, args.key_id)
            print(f"revoked key {info.id} of {info.owner} ({info.role})")
            if args.cancel_pending:
                # whoever runs bin/keys holds the database: no key, and an admin's reach
                by = Principal.without_key(f"bin/keys (revoked key {info.id})", role="admin")
                cancelled = keys.cancel_pending(conn, info.id, by=by)
                for content_id, version, n in cancelled:
                    print(f"cancelled version {version} of content {content_id}: {n} tasks not started")
                print(f"cancelled the unstarted work of {len(cancelled)} versions")
    return _on_database(cfg, work, refusals=(InvalidInput, NotFound))


def bulk_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bin/bulk", description=(
        "Pause or resume the bulk lane (imports), or show whether it is paused. While it is paused no bulk "
        "task is claimed or sent, calls already running finish, bulk saves are still accepted and wait, and "
        "no waiting bulk task fails for its deadline: the resume moves each one's deadline on by the pause. "
        "Exit codes: 0 done, 1 refused (already paused, not paused), 2 cannot reach PostgreSQL or bad "
        "configuration."))
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (("pause", "hold the bulk lane's work back"), ("resume", "let the bulk lane's work go on")):
        action = sub.add_parser(name, help=text)
        action.add_argument("--by", required=True, help="who does it; recorded with the pause")
    sub.add_parser("status", help="whether the bulk lane is paused, since when, by whom, and what waits")
    args = parser.parse_args(argv)
    cfg = _settings()
    from pipeline import pauses
    from pipeline.core.errors import Conflict
    from pipeline.core.principal import Principal
    def work(conn) -> None:
        if args.command == "pause":
            row = pauses.pause(conn, by=Principal.without_key(args.by, role="admin"))
            print(f"paused the bulk lane at {row['paused_at']:%Y-%m-%d %H:%M:%S %Z} (by {row['paused_by']}); "
                  f"calls already running finish")
        elif args.command == "resume":
            row = pauses.resume(conn, by=Principal.without_key(args.by, role="admin"))
            print(f"resumed the bulk lane after {(row['resumed_at'] - row['paused_at']).total_seconds():.0f} s; "
                  f"{row['tasks_moved']} waiting tasks had their deadlines moved on by as much")
        else:
            lane = pauses.state(conn)
            print(f"the bulk lane runs; {lane['waiting']} tasks wait for a worker" if not lane["paused"] else
                  f"the bulk lane is paused since {lane['paused_at']:%Y-%m-%d %H:%M:%S %Z} by "
                  f"{lane['paused_by']}; {lane['waiting']} tasks wait for the resume")
    return _on_database(cfg, work, refusals=(Conflict,))


