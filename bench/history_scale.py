#!/usr/bin/env python3
"""Scale with history: claim-plus-complete, admission and a reconcile run over 10 thousand, 100 thousand
and 1 million finished tasks.

Each size gets its own database, filled with SQL (INSERT ... SELECT generate_series): lessons of
41 tasks (20 images, 20 narrations, one bundle) all succeeded, spread over the last 90 days, with
what such history leaves behind: two events per task, one sent outbox row per task, one ledger row
and one asset per media task, the bundle's dependencies. Then VACUUM ANALYZE, as autovacuum would
have done. The measurements go round-robin over the sizes, so drift on a noisy machine hits them
alike:

* claim + complete: `attempt.claim` then `tasks.succeed` of each media task of a freshly saved
  20-block lesson (two transactions, as a worker does them, without the provider in between);
* admission: the `pending_tasks()` count a save runs under its advisory lock (admit_save);
* save: `versions.save` of that 20-block lesson (admission included), and dispatch: `send_due` of
  its 40 outbox rows (fewer samples: one of each per round);
* reconcile: one `Reconciler.run()`, as `bin/reconcile` runs it every minute; pg_stat_statements
  tells which of its queries grow with the history.

    .venv/bin/python bench/history_scale.py [--sizes 10000,100000,1000000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import hashlib
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import BENCH, Stack, draft, quiet_logs, run_main, servers  # noqa: E402
from bench.report import median, percentile, print_machine, say, table  # noqa: E402
from bench.measure import statement_rows  # noqa: E402

PER_LESSON = 41
DAYS = 90

# One statement per table; :lo and :hi bound the content ids, :n is the number of contents of the database.
FILL = [
    ("contents", """
INSERT INTO contents (id, title, locale, current_version, created_at, updated_at) OVERRIDING SYSTEM VALUE
SELECT c, 'history ' || c, 'zh-CN', 1, at, at
FROM (SELECT c, now() - interval '1 hour' - make_interval(secs => {days} * 86400 * (1 - c::float8 / {n})) AS at
      FROM generate_series({lo}, {hi}) c) s"""),
    ("versions", """
INSERT INTO versions (content_id, version, title, locale, blocks, digest, saved_by, saved_at, deadline_at)
SELECT id, 1, title, locale, '[]'::jsonb, encode(sha256(('v' || id)::bytea), 'hex'), 'history', created_at,
       created_at + interval '1 hour'
FROM contents WHERE id BETWEEN {lo} AND {hi}"""),
    ("tasks", """
INSERT INTO tasks (id, content_id, version, kind, block_key, input, fingerprint, status, attempts, max_attempts,
                   available_at, deadline_at, heartbeat_at, worker, asset_sha256, created_at, updated_at)
OVERRIDING SYSTEM VALUE
SELECT (c.id - 1) * 41 + k + 1, c.id, 1, kind::task_kind, CASE WHEN k = 40 THEN NULL ELSE 'b' || (k / 2 + 1) END,
       jsonb_build_object('kind', kind, 'text', 'history ' || c.id || ' block ' || (k / 2 + 1)),
       encode(sha256(('fp' || c.id || '-' || k)::bytea), 'hex'), 'succeeded', 1, 3, c.created_at,
       c.created_at + interval '1 hour', c.created_at + interval '30 seconds', 'history',
       encode(sha256(('asset' || c.id || '-' || k)::bytea), 'hex'), c.created_at,
       c.created_at + interval '1 minute'
FROM contents c CROSS JOIN generate_series(0, 40) k
CROSS JOIN LATERAL (SELECT CASE WHEN k = 40 THEN 'bundle' WHEN k % 2 = 0 THEN 'image' ELSE 'tts' END AS kind) x
WHERE c.id BETWEEN {lo} AND {hi}"""),
    ("task_deps", """
INSERT INTO task_deps (task_id, depends_on)
SELECT (c - 1) * 41 + 41, (c - 1) * 41 + k + 1 FROM generate_series({lo}, {hi}) c CROSS JOIN generate_series(0, 39) k"""),
    ("assets", """
INSERT INTO assets (sha256, media_type, size, width, height, duration_ms, created_at)
SELECT asset_sha256, CASE kind WHEN 'image' THEN 'image/webp' WHEN 'tts' THEN 'audio/wav' ELSE 'application/zip' END,
       30000, NULL, NULL, NULL, updated_at
FROM tasks WHERE content_id BETWEEN {lo} AND {hi}"""),
    ("asset_inputs", """
INSERT INTO asset_inputs (fingerprint, sha256, created_at)
SELECT fingerprint, asset_sha256, updated_at FROM tasks WHERE content_id BETWEEN {lo} AND {hi}"""),
    ("outbox", """
INSERT INTO outbox (task_id, queue, available_at, created_at, claim_token, claim_until, sent_at, rq_job_id)
SELECT id, kind, created_at, created_at, gen_random_uuid(), created_at + interval '30 seconds', created_at,
       'task-' || id FROM tasks WHERE content_id BETWEEN {lo} AND {hi}"""),
    ("events", """
INSERT INTO events (task_id, content_id, version, action, from_status, to_status, actor, attempt, reason, at)
SELECT t.id, t.content_id, 1, 'transition', s.from_status::task_status, s.to_status::task_status, 'history', 1,
       s.reason, t.updated_at
FROM tasks t CROSS JOIN (VALUES ('ready', 'running', 'claimed'), ('running', 'succeeded', 'succeeded'))
     s(from_status, to_status, reason)
WHERE t.content_id BETWEEN {lo} AND {hi}"""),
    ("provider_calls", """
INSERT INTO provider_calls (task_id, attempt, provider, model, idempotency_key, outcome, http_status, latency_ms,
                            cost, at)
SELECT id, 1, 'history-' || kind, 'model', substr(fingerprint, 1, 48), 'succeeded', 200, 1500, 0.04, updated_at
FROM tasks WHERE kind <> 'bundle' AND content_id BETWEEN {lo} AND {hi}"""),
]


def generate(stack: Stack, name: str, tasks: int, chunk: int = 6000) -> tuple[int, float]:
    """A database with about `tasks` finished tasks; returns the exact count and the seconds it took."""
    started = time.perf_counter()
    stack.create_database(name)
    contents = math.ceil(tasks / PER_LESSON)
    with stack.db(name) as conn:
        for lo in range(1, contents + 1, chunk):
            hi = min(contents, lo + chunk - 1)
            with conn.transaction():
                for _, sql in FILL:
                    conn.execute(sql.format(lo=lo, hi=hi, n=contents, days=DAYS).encode())
        for table_name in ("contents", "tasks"):
            conn.execute(f"SELECT setval(pg_get_serial_sequence('{table_name}', 'id'), "
                         f"(SELECT max(id) FROM {table_name}))".encode())
        conn.execute("VACUUM ANALYZE")
        count = conn.execute("SELECT count(*) AS n FROM tasks").fetchone()["n"]
    return count, time.perf_counter() - started


def claim_complete(conn, cfg, tag: str) -> tuple[list[float], float, float]:
    """Save a 20-block lesson, send its outbox, then claim and complete each media task; the latencies."""
    from pipeline import attempt, dispatch, runtime, tasks, versions
    from pipeline.tasks import Asset
    import redis
    started = time.perf_counter()
    saved = versions.save(conn, draft(20, tag), cfg, by=BENCH)
    save_s = time.perf_counter() - started
    started = time.perf_counter()
    dispatch.send_due(conn, redis.Redis.from_url(cfg.redis_url), batch=200)
    send_s = time.perf_counter() - started
    ids = [r["id"] for r in conn.execute("SELECT id FROM tasks WHERE content_id = %s AND kind <> 'bundle' "
                                         "ORDER BY id", (saved.content_id,))]
    out = []
    rt = runtime.with_providers(cfg, worker_id="bench")
    for task_id in ids:
        started = time.perf_counter()
        task = attempt.claim(rt, task_id).task
        sha = hashlib.sha256(f"{tag}-{task_id}".encode()).hexdigest()
        tasks.succeed(conn, task, Asset(sha, "image/webp", 300), actor="bench")
        out.append(time.perf_counter() - started)
    rt.close()
    return out, save_s, send_s


def admission(conn, samples: int) -> list[float]:
    out = []
    for _ in range(samples):
        started = time.perf_counter()
        conn.execute("SELECT pending_tasks()").fetchone()
        out.append(time.perf_counter() - started)
    return out


def reconcile_once(stack: Stack, name: str, cfg, providers) -> tuple[float, dict]:
    from pipeline.reconcile import Reconciler
    with stack.db(name) as conn:
        conn.execute("SELECT pg_stat_statements_reset()")
        started = time.perf_counter()
        report = Reconciler(cfg, conn, providers).run()
        seconds = time.perf_counter() - started
        rows = statement_rows(conn, name)
    per_query: dict[str, float] = {}
    for row in rows:
        if row["name"]:
            per_query[row["name"]] = per_query.get(row["name"], 0.0) + row["exec_ms"]
    if report.errors or not report.locked:
        raise RuntimeError(f"reconcile run on {name}: locked={report.locked} errors={report.errors}")
    return seconds, per_query


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of 40 claim+complete and 40 admission samples")
    args = parser.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",")]
    from pipeline.executor import build_providers
    with servers(statements=True) as stack:
        print_machine(stack)
        dbs, made = {}, []
        for size in sizes:
            name = f"history_{size}"
            count, seconds = generate(stack, name, size)
            dbs[size] = name
            made.append([size, count, seconds])
            say(f"  generated {count:,} finished tasks in {seconds:.1f} s")
        say(table(["size", "finished tasks", "generated in s"], made))
        cfgs = {size: stack.settings(DATABASE_URL=stack.pg.url(name)) for size, name in dbs.items()}
        providers = build_providers(cfgs[sizes[0]])
        lat = {s: {"claim": [], "admission": [], "save": [], "send": [], "reconcile": []} for s in sizes}
        queries = {s: [] for s in sizes}
        with quiet_logs(stack.logs / "driver.log"):
            for rnd in range(args.rounds):
                for size in (sizes if rnd % 2 == 0 else sizes[::-1]):
                    with stack.db(dbs[size]) as conn:
                        claims, save_s, send_s = claim_complete(conn, cfgs[size], f"scale-{size}-{rnd}")
                        lat[size]["claim"] += claims
                        lat[size]["save"].append(save_s)
                        lat[size]["send"].append(send_s)
                        lat[size]["admission"] += admission(conn, 40)
                    seconds, per_query = reconcile_once(stack, dbs[size], cfgs[size], providers)
                    lat[size]["reconcile"].append(seconds)
                    queries[size].append(per_query)
        report(sizes, lat, queries)
    return 0


def report(sizes: list[int], lat: dict, queries: dict) -> None:
    ms = lambda xs: median(xs) * 1000  # noqa: E731
    p99 = lambda xs: percentile(xs, 99) * 1000  # noqa: E731
    first, last = sizes[0], sizes[-1]
    rows = []
    for label, key, digits in (("claim + complete (2 transactions), p50", "claim", "p50"),
                               ("claim + complete, p99", "claim", "p99"),
                               ("admission count, p50", "admission", "p50"),
                               ("admission count, p99", "admission", "p99"),
                               ("save of a 20-block lesson, median", "save", "p50"),
                               ("dispatch of its 40 outbox rows (send_due), median", "send", "p50"),
                               ("reconcile run, median", "reconcile", "p50")):
        f = ms if digits == "p50" else p99
        values = [f(lat[s][key]) for s in sizes]
        rows.append([label, *values, f"{values[-1] / values[0]:.2f}x"])
    say()
    say(f"Latency in ms with N finished tasks in the history (samples per size: "
        f"{len(lat[first]['claim'])} claims, {len(lat[first]['admission'])} admission counts, "
        f"{len(lat[first]['save'])} saves and reconcile runs):")
    say(table(["operation", *[f"{s:,}" for s in sizes], f"{last:,} / {first:,}"], rows, digits=2))
    say()
    totals = {s: {} for s in sizes}
    for s in sizes:
        for run in queries[s]:
            for name, value in run.items():
                totals[s].setdefault(name, []).append(value)
    names = sorted(totals[last], key=lambda n: -median(totals[last][n]))[:6]
    rows = [[n, *[median(totals[s].get(n, [0.0])) for s in sizes]] for n in names]
    server = {s: [sum(run.values()) for run in queries[s]] for s in sizes}
    rows.append(["all its queries (server time)", *[median(server[s]) for s in sizes]])
    rows.append(["the rest: round trips and Python (run minus server time)",
                 *[median(r * 1000 - q for r, q in zip(lat[s]["reconcile"], server[s])) for s in sizes]])
    say("Where a reconcile run's time goes (pg_stat_statements; median ms per run):")
    say(table(["part", *[f"{s:,}" for s in sizes], f"{last:,} / {first:,}"],
              [[*r, f"{r[-1] / max(r[1], 1e-3):.1f}x"] for r in rows], digits=2))


if __name__ == "__main__":
    run_main(main)
