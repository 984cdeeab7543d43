"""The plain-RQ web baseline of bench/save_latency.py, served by gunicorn like ours.

`POST /api/contents` validates the same body with the same parser and enqueues one RQ job per
block and media kind straight into Redis (what a plain RQ application does): no database, no
version, no outbox, no admission, no authentication. `GET /healthz` is the bare HTTP floor.
"""

from __future__ import annotations

import os

import redis
from flask import Flask, jsonify, request
from rq import Queue

from pipeline.core.content import parse_draft


def create_app() -> Flask:
    app = Flask(__name__)
    connection = redis.Redis.from_url(os.environ["REDIS_URL"], socket_timeout=2, socket_connect_timeout=2)
    queues = {kind: Queue(kind, connection=connection) for kind in ("image", "tts")}

    @app.post("/api/contents")
    def save():
        draft = parse_draft(request.get_json())
        with connection.pipeline() as pipe:
            for kind, queue in queues.items():
                queue.enqueue_many([Queue.prepare_data("bench.jobs.noop", args=(block.key,), result_ttl=0)
                                    for block in draft.blocks], pipeline=pipe)
            pipe.execute()
        return jsonify(accepted=len(draft.blocks) * 2), 202

    @app.get("/healthz")
    def healthz():
        return jsonify(status="ok")

    return app
