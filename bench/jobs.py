"""Job functions of the plain-RQ baselines, referenced by dotted path like any RQ job."""

from __future__ import annotations

import os
import time

_providers: dict = {}


def noop(*args: object) -> None:
    """The plain-RQ baseline job: nothing at all."""
    return None


def stamp(key: str) -> None:
    """Record when the job started (Redis hash bench:started) for the latency baseline."""
    from rq import get_current_job

    job = get_current_job()
    job.connection.hset("bench:started", key, f"{time.time():.6f}")


def _provider(kind: str):
    """The same HTTP adapter our workers use, built once per process from NAIVE_* variables."""
    if kind not in _providers:
        from providers.registry import ProviderConfig, build_provider
        timeout = float(os.environ["NAIVE_READ_TIMEOUT"])
        cfg = ProviderConfig(backend="openai", base_url=os.environ["NAIVE_BASE_URL"], api_key="sk-naive-bench",
                             voice="alloy", connect_timeout=float(os.environ["NAIVE_CONNECT_TIMEOUT"]),
                             read_timeout=timeout)
        _providers[kind] = build_provider(kind, cfg)
    return _providers[kind]


def naive_generate(kind: str, text: str, key: str) -> str:
    """A naive pipeline's job: call the provider, keep the asset; any error goes to RQ's Retry.

    Counts, in Redis, what happened: naive:delivered (a hash key -> sha256) and naive:<ErrorClass>.
    """
    from rq import get_current_job

    from providers.base import GenerateRequest
    from receipts.media import MediaStore

    connection = get_current_job().connection
    params = {"model": f"fake-{kind}", "size": "1024x1024"} if kind == "image" else {
        "model": f"fake-{kind}", "voice": "alloy", "locale": "zh-CN"}
    try:
        result = _provider(kind).generate(GenerateRequest(kind, text, params, key))
    except Exception as exc:
        connection.hincrby("naive:errors", exc.__class__.__name__, 1)
        raise
    sha = MediaStore(os.environ["NAIVE_MEDIA_DIR"]).put(result.data)
    connection.hset("naive:delivered", key, sha)
    return sha
