"""Schemathesis over the OpenAPI document, against the app as production serves it: gunicorn (the Procfile's web
line) on 127.0.0.1, on a database and a Valkey of its own, holding a delivered content, a failed and an unknown
task. Every check Schemathesis has, with schemathesis.toml's settings (the file the five-minute run by hand reads,
docs/security.md): no 5xx, every status documented, no invalid request accepted, no valid one refused, every
answer as the document says.

One test per operation, so that pytest-xdist spreads them (the server starts once per module in each process
that runs some), then one for chains of operations. An operation's test runs the coverage phase (every boundary
of every rule, a parameter sent twice) and the fuzzing phase (EXAMPLES valid and as many invalid requests) on a
path that names the stored work, and with the stored failed task in a body's `task_ids`: a generated id would
mostly meet a 404 before anything else is read (the paths themselves are the router's; test_crafted_input.py
sends them any text). A query parameter is now and then LONG, which the server itself refuses (414). The stateful
phase chains operations by what their answers name (a save's Location, ids). Generation is seeded, though the
fuzzing phase also learns from the answers, so runs differ a little.

How long is enough: on the code before web/contract.py, this module found what a five-minute run had found
(the demo job's 500 for a scenario that is a list; a null locale, bulk notes over their limit, media links' c and v
below 1 and query values outside the document accepted; the server's 414 and the 500 undocumented).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
import requests

schemathesis = pytest.importorskip("schemathesis")
from schemathesis.engine import Status, events, from_schema  # noqa: E402

from bin.embedded import Valkey, free_port  # noqa: E402
from pipeline import keys, runtime, settings  # noqa: E402
from pipeline.db import connect  # noqa: E402
from providers.errors import Ambiguous, Permanent  # noqa: E402
from receipts.media import MediaStore  # noqa: E402
from testkit.helpers import ControlledExecutor, lesson, wait_until  # noqa: E402
from testkit.system import System  # noqa: E402
from testkit.webapp import TEST_ENV, Work  # noqa: E402
from tests.conftest import create_database, drop_database  # noqa: E402
from web import openapi  # noqa: E402

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[3]
CONFIG = tomllib.loads((ROOT / "schemathesis.toml").read_text())
SEED = 20261206
EXAMPLES = 150   # per operation and generation mode: about 5,400 requests in all, 90 to 115 s of CPU
STATEFUL_STEPS = 10
LONG = "x" * 5000   # a query value longer than the server reads: its own 414
QUERY = sorted({p["name"] for ops in openapi.document()["paths"].values() for op in ops.values()
                for p in op.get("parameters", ()) if p["in"] == "query"})
# every operation but the one that serves the document, which Schemathesis reads to start and does not test
OPERATIONS = [f"{method.upper()} {path}" for path, ops in openapi.document()["paths"].items() for method in ops
              if path != "/api/openapi.json"]


@pytest.fixture(scope="module")
def served(servers, tmp_path_factory):
    """gunicorn as the Procfile runs it, with its own database and Valkey; (base URL, admin key, the path parameters
    that name the stored work)."""
    base = tmp_path_factory.mktemp("fuzz")
    database_url = create_database(servers)
    valkey = Valkey(base / "valkey", free_port())
    valkey.start()
    env = {**TEST_ENV, "DATABASE_URL": database_url, "REDIS_URL": valkey.url(), "MEDIA_DIR": str(base / "media"),
           # admission and the key's own limits far away: a deliberate 503 or 429 cannot mask anything
           "MAX_PENDING_TASKS": "100000000", "KEY_MAX_PENDING_TASKS": "100000000", "KEY_SAVES_PER_MINUTE": "1000000"}
    (base / "logs").mkdir()
    web = System(env, base / "logs")
    port = free_port()
    web.workers.append(web._spawn(["-m", "gunicorn", "-c", "bin/gunicorn_conf.py", "--bind", f"127.0.0.1:{port}",
                                   "--workers", "1", "web:create_app()"], "web"))
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: answers(url), timeout=60, message="gunicorn answering")
        with connect(database_url, autocommit=True) as conn:
            _, token = keys.create(conn, "fuzz@example.com", "admin")
        yield url, token, stored_work(url, token, settings.load(env), base / "media")
    finally:
        web.stop()
        valkey.stop()
        drop_database(servers, database_url)


def answers(url: str) -> bool:
    try:
        return requests.get(url + "/healthz", timeout=1).status_code == 200
    except requests.RequestException:
        return False


def stored_work(url: str, token: str, cfg: settings.Settings, media_dir: Path) -> dict[str, object]:
    """A content: version 1 made and approved (a delivery, media), version 2 with a failed picture and a
    narration whose outcome is unknown; the path parameters that name the content, version 2, its failed
    picture and a stored medium."""
    api = requests.Session()
    api.headers["X-API-Key"] = token
    executor = ControlledExecutor(MediaStore(media_dir))
    work = Work(cfg, executor, runtime.Runtime(cfg, executor, worker_id="fuzz"))
    try:
        first = api.post(url + "/api/contents", json=lesson(2), timeout=10).json()
        work.until_idle()
        assert api.post(url + first["status_url"] + "/approve", timeout=10).status_code == 200
        second = api.put(url + first["content_url"], json={**lesson(2, prefix="新"), "base_version": 1},
                         timeout=10).json()
        tasks = api.get(url + second["status_url"], timeout=10).json()["tasks"]
        for task in tasks:
            if task["block"] == "b1":
                executor.script[task["id"]] = [Permanent("refused") if task["kind"] == "image" else
                                               Ambiguous("read timeout after send")]
        work.until_idle()
    finally:
        runtime.install(None)
    made = api.get(url + first["status_url"], timeout=10).json()["tasks"]
    return {"content_id": first["content_id"], "version": 2,
            "task_id": next(t["id"] for t in tasks if t["block"] == "b1" and t["kind"] == "image"),
            "sha256": next(t["sha256"] for t in made if t["kind"] == "image")}


def run(url: str, token: str, paths: dict[str, object], label: str | None) -> tuple[int, list[str]]:
    """Run Schemathesis on one operation (`label`, its path naming the stored work), or its stateful phase over
    all (None): (test cases, failures)."""
    phases = {"examples": {"enabled": False},
              "coverage": {"enabled": label is not None, "generate-duplicate-query-parameters": True},
              "fuzzing": {"enabled": label is not None},
              "stateful": {"enabled": label is None, "max-steps": STATEFUL_STEPS}}
    config = schemathesis.Config.from_dict({
        **CONFIG, "headers": {"X-API-Key": token}, "workers": 1, "seed": SEED, "continue-on-failure": True,
        "generation": {"max-examples": EXAMPLES}, "phases": phases,
        "dictionaries": {"long": {"values": [LONG]}},
        "parameters": {**{f"path.{name}": value for name, value in paths.items()},
                       "body.task_ids[*]": paths["task_id"],
                       **{f"query.{name}": {"dictionary": "long", "probability": 0.1} for name in QUERY}}
        if label else {}})
    schema = schemathesis.openapi.from_url(url + "/api/openapi.json", config=config)
    if label is not None:
        schema = schema.exclude(func=lambda ctx: ctx.operation.label != label)
    cases, failures = 0, []
    for event in from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished):
            cases += len(event.recorder.cases)
            for case_id, checks in event.recorder.checks.items():
                answer = event.recorder.interactions.get(case_id)
                status = answer.response.status_code if answer and answer.response else "no answer"
                failures += [f"{c.failure_info.failure.code} {c.failure_info.failure.title} ({status}): "
                             f"{c.failure_info.code_sample}" for c in checks if c.status == Status.FAILURE]
        elif isinstance(event, (events.NonFatalError, events.FatalError)):
            failures.append(f"schemathesis could not run: {getattr(event, 'value', None) or event.exception}")
    return cases, sorted(set(failures))


def test_every_operation_of_the_served_document_has_a_test_here(served):
    url, _, _ = served
    schema = schemathesis.openapi.from_url(url + "/api/openapi.json")
    assert {result.ok().label for result in schema.get_all_operations()} == set(OPERATIONS)


@pytest.mark.parametrize("label", OPERATIONS)
def test_every_operation_keeps_to_the_openapi_document(served, label):
    cases, failures = run(*served, label)
    assert cases >= 5, f"only {cases} test cases ran"
    assert not failures, "\n".join(failures)


def test_chains_of_operations_keep_to_the_openapi_document(served):
    cases, failures = run(*served, None)
    assert cases >= 5, f"only {cases} test cases ran"
    assert not failures, "\n".join(failures)
