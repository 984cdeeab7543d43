"""Configuration: read once from the environment into a frozen `Settings`.

This is the only module that reads `os.environ`. Every setting has a default,
documented in the README ("Configuration"); an invalid value raises
`ConfigError` naming the variable and what it accepts. Nothing is read at
import time: call `load()`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping
from urllib.parse import urlsplit

from pipeline.core.errors import ConfigError
from pipeline.core import kinds
from pipeline.core.webhooks import networks as webhook_networks
from providers import openai_models as catalogue
from providers.registry import ProviderConfig
from providers.urls import UnsafeBaseURL, check_scheme

ROOT = Path(__file__).resolve().parent.parent
ADAPTER = ProviderConfig()   # the adapters' own defaults (providers/registry.py), the one place they are set


@dataclass(frozen=True)
class ProviderSettings:
    """One provider's settings (IMAGE_* or TTS_*): the adapter's (`ProviderConfig`, whose defaults
    these are) and the pipeline's own (limits, cost, budget).

    `model`, `size` and `voice` left empty take the chosen backend's own default
    (`BACKEND_DEFAULTS`), never another backend's. `options` holds the model
    options that are set (quality, output_format, background for images;
    instructions for speech); they are part of every input fingerprint. `base_url`
    is empty until set: the openai backend needs one (no URL is assumed).
    """

    backend: str = ADAPTER.backend
    base_url: str = ""
    api_key: str = field(default=ADAPTER.api_key, repr=False)
    model: str = ADAPTER.model
    size: str = ADAPTER.size
    voice: str = ADAPTER.voice
    options: tuple[tuple[str, str], ...] = ADAPTER.options
    honours_idempotency_key: bool = ADAPTER.honours_idempotency_key
    max_concurrency: int = 4
    interactive_slots: int | None = None   # call slots the bulk lane may not take; None: `reserved_slots`' default
    rate_per_minute: int = 600
    connect_timeout: float = ADAPTER.connect_timeout
    read_timeout: float = ADAPTER.read_timeout
    call_timeout: float = ADAPTER.call_timeout
    max_bytes: int = ADAPTER.max_bytes
    cost_per_call: float = 0.0             # a call's estimate for the configured model (speech: 1,000 characters)
    daily_budget: float | None = None      # spend limit per UTC day, in the unit of cost_per_call
    priced_by: str = ""                    # "<PREFIX>_COST_PER_CALL" (the setting), "table" (pipeline/core/prices.py)

    @property
    def reserved_slots(self) -> int:
        """Call slots held back for the interactive lane: INTERACTIVE_SLOTS, by default 1 (0 with a single slot,
        so a one-slot setup still runs its bulk work). The Procfile's shell default says the same."""
        if self.interactive_slots is not None:
            return self.interactive_slots
        return 1 if self.max_concurrency > 1 else 0

    @property
    def bulk_slots(self) -> int:
        """Call slots the bulk lane may hold at once."""
        return self.max_concurrency - self.reserved_slots


@dataclass(frozen=True)
class KindSettings:
    """What every kind has (<PREFIX>_ENABLED, _WORKERS, _INTERACTIVE_WORKERS) and a local kind's own options
    (pipeline/core/kinds/)."""

    enabled: bool = True
    workers: int | None = None              # the Procfile's worker-<kind> pool; None: the kind's default
    interactive_workers: int | None = None  # worker-<kind>-interactive; None: the kind's default
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StorageSettings:
    """Where media and receipts live (STORAGE, S3_*, MEDIA_DELIVERY; docs/deploy.md).

    `local` keeps them under MEDIA_DIR (one machine). `s3` keeps them in a bucket of
    any S3-compatible service, which every machine of a deployment shares; MEDIA_DIR then
    holds only what is local to a machine. Without S3 keys the client takes boto3's own
    credential chain (an instance or pod role).
    """

    backend: str = "local"
    endpoint_url: str = ""                 # empty: AWS S3 of the region
    bucket: str = ""
    region: str = "us-east-1"
    access_key_id: str = field(default="", repr=False)
    secret_access_key: str = field(default="", repr=False)
    prefix: str = ""                       # every key under this prefix, e.g. "prod/"
    path_style: bool = False               # bucket in the path, for services without virtual hosts
    delivery: str = "app"                  # media through the app, or "redirect" to a presigned URL
    redirect_seconds: int = 300            # lifetime of a presigned URL made for one redirect


@dataclass(frozen=True)
class WebhookSettings:
    """Webhooks (WEBHOOK_*, PUBLIC_URL; docs/webhooks.md): the pool that sends them, how long an attempt may take,
    how long a message is tried, which private networks may receive, and the address in the payloads' URLs."""

    workers: int = 2                        # the Procfile's worker-webhook pool
    timeout_seconds: float = 10.0           # one attempt, connection to last byte read
    retry_seconds: float = 3 * 86_400.0     # a message not delivered after this long is dead
    backoff_base_seconds: float = 5.0
    backoff_cap_seconds: float = 21_600.0
    allow_networks: tuple[str, ...] = ()    # non-public networks that may receive (a test, an internal deployment)
    public_url: str = ""                    # where consumers reach the API; empty: http://127.0.0.1:PORT


@dataclass(frozen=True)
class Settings:
    database_url: str | None = field(default=None, repr=False)
    database_session_url: str | None = field(default=None, repr=False)   # None: database_url
    db_pooler: str = "none"        # "pgbouncer": a pooler in front, no startup options (pipeline/servers.py)
    redis_url: str | None = field(default=None, repr=False)
    redis_ca_file: Path | None = None   # CA of a rediss:// server's certificate; None: the system's CAs
    media_dir: Path = ROOT / ".data" / "media"
    secret_key: str = field(default="", repr=False)
    port: int = 8000
    dev_pg_port: int = 55432       # bin/dev's embedded PostgreSQL
    dev_redis_port: int = 56379    # bin/dev's embedded Valkey
    max_pending_tasks: int = 10_000
    db_statement_timeout_ms: int = 30_000       # longest statement on any of our connections
    db_lock_timeout_ms: int = 5_000             # longest wait for a row or table lock
    db_idle_in_transaction_ms: int = 60_000     # a transaction left open this long is ended by the server
    lease_seconds: float = 30.0
    heartbeat_seconds: float = 10.0
    deadline_seconds: float = 3600.0
    max_attempts: int = 3
    attempt_ceiling_seconds: float = 0.0     # 0: the longest provider call timeout + 60 s (see load)
    backoff_base_seconds: float = 1.0
    backoff_cap_seconds: float = 30.0
    dispatch_claim_seconds: float = 30.0
    lost_dispatch_seconds: float = 60.0
    recovery_scan_seconds: float = 5.0     # the dispatcher's scans of expired leases and lost messages; 0: off
    slot_wait_seconds: float = 60.0        # a wait for a call slot that nothing woke ends after this long
    reconcile_slot_seconds: int = 60       # `bin/reconcile --slot`: one run per slot of this length, on any machine
    # lanes (pipeline/core/lanes.py; docs/decisions.md, "Worker pools" and "Lanes"); the pools are in `kinds`
    bulk_queue_depth: int | None = None    # bulk messages waiting in RQ per kind; None: twice its concurrency
    # the bulk lane's images through the provider's Batch API (pipeline/batches.py; docs/providers.md)
    image_bulk_backend: str = "sync"       # "batch": bulk-lane images are gathered into Batch API jobs
    image_batch_max_lines: int = 1_000     # lines per batch (the API takes up to 50,000 per input file)
    image_batch_gather_seconds: float = 60.0   # how long a line waits for company before its batch is sent
    image_batch_poll_seconds: float = 30.0     # how often a sent batch is asked how it stands
    media_retention_days: int = 30
    demo_mode: bool = False
    allow_self_approval: bool = False      # the key or person that saved a version may approve it (DEMO_MODE: on)
    # security (docs/security.md)
    session_idle_seconds: float = 3600.0       # a UI session ends after this long without a request
    session_max_seconds: float = 43_200.0      # and this long after sign-in, whatever happens
    trusted_proxies: int = 0                   # reverse proxies in front of the web app (ProxyFix); 0: none
    web_request_seconds: float = 30.0          # a request reaches the app only whole, within this (bin/webworker.py)
    media_url_ttl_seconds: int = 86_400        # lifetime of the delivery manifest's signed media URLs
    media_link_cache: str = "private"          # "public": caches may keep a signed link's answer until it expires
    metrics_token: str | None = field(default=None, repr=False)   # Bearer token for /metrics
    key_max_pending_tasks: int = 2_000         # pending tasks one key's saves may hold
    key_saves_per_minute: int = 60             # saves one key may make per minute
    bulk_save_blocks: int = 50                 # a save of more blocks runs in the bulk lane (pipeline/core/lanes.py)
    lab_api_key: str | None = field(default=None, repr=False)
    content_budget: float | None = None    # spend limit per content, in the unit of *_COST_PER_CALL
    key_daily_spend: float | None = None   # what one API key's actions may book per UTC day (pipeline/keyspend.py)
    team_daily_spend: float | None = None  # what one team's keys together may book per UTC day
    budget_recheck_seconds: float = 60.0   # how often a task paused by a budget looks again
    tracing: bool = False                  # OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT set: traces (pipeline/tracing.py)
    # per kind (pipeline/core/kinds/): a paid kind's provider (IMAGE_*, TTS_*), and every kind's pools and options
    providers: Mapping[str, ProviderSettings] = field(default_factory=lambda: {
        kind.name: ProviderSettings(**kind.provider_defaults) for kind in kinds.paid()})
    kinds: Mapping[str, KindSettings] = field(default_factory=lambda: {
        kind.name: KindSettings(kind.enabled_by_default, options={n: d for n, (_, d) in kind.options.items()})
        for kind in kinds.every()})
    kinds_from: tuple[str, ...] = ()       # KINDS_FROM: modules of a deployment's own kinds

    def on(self, kind: str) -> bool:
        """Whether a kind's tasks are planned (<PREFIX>_ENABLED)."""
        return kind in self.kinds and self.kinds[kind].enabled
    storage: StorageSettings = StorageSettings()
    webhooks: WebhookSettings = WebhookSettings()


def session_options(cfg: "Settings") -> str:
    """libpq `options` that bound every statement, lock wait and idle transaction of a connection."""
    return (f"-c statement_timeout={cfg.db_statement_timeout_ms} -c lock_timeout={cfg.db_lock_timeout_ms} "
            f"-c idle_in_transaction_session_timeout={cfg.db_idle_in_transaction_ms}")


def masked_url(raw: str | None) -> str:
    """A URL fit for a message: its password replaced by ***."""
    parts = urlsplit(raw or "")
    if parts.password is None:
        return raw or ""
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return parts._replace(netloc=user + parts.netloc.rpartition("@")[2]).geturl()


def _url(name: str, schemes: tuple[str, ...]) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        try:
            parts = urlsplit(raw)
            parts.port   # noqa: B018 - raises ValueError on a port that is not a number
        except ValueError:
            parts = None
        if parts is None or parts.scheme not in schemes or not parts.netloc and not parts.path:
            raise ConfigError(f"{name}={masked_url(raw)!r} is not a valid URL; "
                              f"expected {' or '.join(schemes)}://HOST[:PORT]/...")
        return raw
    return parse


def _file(name: str) -> Callable[[str], Path]:
    def parse(raw: str) -> Path:
        path = Path(raw).expanduser()
        if not path.is_file():
            raise ConfigError(f"{name}={raw!r} is not a readable file; give the path of a PEM file")
        return path.resolve()
    return parse


def _int(name: str, low: int, high: int) -> Callable[[str], int]:
    return _number(name, low, high, int, "a whole number")


def _float(name: str, low: float, high: float) -> Callable[[str], float]:
    return _number(name, low, high, float, "a number")


def _number(name: str, low, high, convert: Callable[[str], Any], what: str) -> Callable[[str], Any]:
    """A parser of a setting's number: `convert`ed, and within low..high, or a ConfigError naming the setting."""
    def parse(raw: str):
        try:
            value = convert(raw)
        except ValueError:
            raise ConfigError(f"{name}={raw!r} is not {what}; expected {low}..{high}") from None
        if not low <= value <= high:
            raise ConfigError(f"{name}={value} is out of range; expected {low}..{high}")
        return value
    return parse


def _bool(name: str) -> Callable[[str], bool]:
    def parse(raw: str) -> bool:
        value = raw.strip().lower()
        if value in ("1", "true", "yes", "on"):
            return True
        if value in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{name}={raw!r} is not a boolean; expected true or false")
    return parse


def _choice(name: str, choices: tuple[str, ...]) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        if raw not in choices:
            raise ConfigError(f"{name}={raw!r} is not supported; expected one of: {', '.join(choices)}")
        return raw
    return parse


MIN_SECRET = 32
MAKE_SECRET = "python -c 'import secrets; print(secrets.token_urlsafe(48))'"


def _secret(name: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        if len(raw) < MIN_SECRET:
            raise ConfigError(f"{name} is too short ({len(raw)} characters); use at least {MIN_SECRET} random "
                              f"characters, e.g. from {MAKE_SECRET}")
        return raw
    return parse


def _text(raw: str) -> str:
    return raw


def _provider(env: Mapping[str, str], kind: kinds.Kind, default: ProviderSettings, today: date) -> ProviderSettings:
    prefix = kind.prefix
    spec = {
        "backend": ("PROVIDER", _choice(f"{prefix}_PROVIDER", ("local", "openai"))),
        "base_url": ("BASE_URL", _base_url(f"{prefix}_BASE_URL")),
        "api_key": ("API_KEY", _text),
        "model": ("MODEL", _text),
        "size": ("SIZE", _text),
        "voice": ("VOICE", _text),
        "honours_idempotency_key": ("HONOURS_IDEMPOTENCY_KEY", _bool(f"{prefix}_HONOURS_IDEMPOTENCY_KEY")),
        "max_concurrency": ("MAX_CONCURRENCY", _int(f"{prefix}_MAX_CONCURRENCY", 1, 1000)),
        "interactive_slots": ("INTERACTIVE_SLOTS", _int(f"{prefix}_INTERACTIVE_SLOTS", 0, 999)),
        "rate_per_minute": ("RATE_PER_MINUTE", _int(f"{prefix}_RATE_PER_MINUTE", 1, 1_000_000)),
        "connect_timeout": ("CONNECT_TIMEOUT", _float(f"{prefix}_CONNECT_TIMEOUT", 0.05, 120)),
        "read_timeout": ("READ_TIMEOUT", _float(f"{prefix}_READ_TIMEOUT", 0.05, 3600)),
        "call_timeout": ("CALL_TIMEOUT", _float(f"{prefix}_CALL_TIMEOUT", 0.1, 3600)),
        "max_bytes": ("MAX_BYTES", _int(f"{prefix}_MAX_BYTES", 1024, 2**31)),
        "cost_per_call": ("COST_PER_CALL", _float(f"{prefix}_COST_PER_CALL", 0, 1000)),
        "daily_budget": ("DAILY_BUDGET", _budget(f"{prefix}_DAILY_BUDGET")),
    }
    values = _read(env, {k: (f"{prefix}_{suffix}", parse) for k, (suffix, parse) in spec.items()})
    backend = values.get("backend", default.backend)
    chosen = {"model": "", "size": "", "voice": "", **kind.backend_defaults.get(backend, {})}
    values = {**chosen, **values, "options": _options(env, prefix, kind.provider_options)}
    if "cost_per_call" in values:
        values["priced_by"] = f"{prefix}_COST_PER_CALL"
    elif backend in PAID_BACKENDS:
        values.update(cost_per_call=_table_price(kind, default, values), priced_by="table")
    result = ProviderSettings(**{**default.__dict__, **values})
    if result.bulk_slots < 1:
        raise ConfigError(f"{prefix}_INTERACTIVE_SLOTS={result.reserved_slots} leaves the bulk lane no call slot of "
                          f"{prefix}_MAX_CONCURRENCY={result.max_concurrency}: it must be smaller (0: bulk may take "
                          f"every slot)")
    if result.backend == "openai":
        _check_model(prefix, result, today)
    if result.backend == "openai" and not (result.base_url and result.api_key):
        raise ConfigError(f"{prefix}_PROVIDER=openai needs {prefix}_BASE_URL (such as https://api.openai.com/v1) "
                          f"and {prefix}_API_KEY")
    if result.backend in PAID_BACKENDS and not env.get(f"{prefix}_DAILY_BUDGET"):
        raise ConfigError(f"{prefix}_PROVIDER={result.backend} is a paid provider and needs a spend cap: set "
                          f"{prefix}_DAILY_BUDGET (per UTC day, in the unit of {prefix}_COST_PER_CALL), or "
                          f"{prefix}_DAILY_BUDGET=unlimited to say there is none")
    if result.daily_budget is not None and result.cost_per_call <= 0 and result.backend in PAID_BACKENDS:
        raise ConfigError(f"{prefix}_DAILY_BUDGET={result.daily_budget:g} can never be reached while a call costs 0 "
                          f"(the price table has no {result.model!r}): set {prefix}_COST_PER_CALL, in the "
                          f"budget's unit")
    return result


def _check_model(prefix: str, p: ProviderSettings, today: date) -> None:
    """ConfigError naming the setting when the catalogue (providers/openai_models.py) says the configured model is
    shut down or does not take the configured size or options."""
    why = catalogue.config_refusal(prefix, p.model, p.size, dict(p.options), today)
    if why:
        raise ConfigError(why)


def _table_price(kind: kinds.Kind, default: ProviderSettings, values: dict) -> float:
    """The published price of one call of the configured model (of the kind's `probe` input: speech prices 1,000
    characters); 0 when unknown."""
    p = ProviderSettings(**{**default.__dict__, **values})
    return kind.estimate(p, dict(kind.probe), False) or 0.0


PAID_BACKENDS = ("openai",)   # providers that charge for a call: they never start without a spend cap
UNLIMITED = "unlimited"


def _budget(name: str) -> Callable[[str], float | None]:
    """A spend limit: a number, or `unlimited` said explicitly (None)."""
    number = _float(name, 0, 1e9)

    def parse(raw: str) -> float | None:
        return None if raw.strip().lower() == UNLIMITED else number(raw)
    return parse


def _options(env: Mapping[str, str], prefix: str, taken: Mapping) -> tuple[tuple[str, str], ...]:
    found = []
    for option, allowed in taken.items():
        name, raw = f"{prefix}_{option.upper()}", env.get(f"{prefix}_{option.upper()}", "")
        if raw and allowed is not None and raw not in allowed:
            raise ConfigError(f"{name}={raw!r} is not supported; expected one of: {', '.join(allowed)}")
        if raw:
            found.append((option, raw))
    return tuple(found)


def _base_url(name: str) -> Callable[[str], str]:
    check = _url(name, ("http", "https"))

    def parse(raw: str) -> str:
        try:
            return check_scheme(check(raw))
        except UnsafeBaseURL as exc:
            raise ConfigError(f"{name}: {exc}") from None
    return parse


def _read(env: Mapping[str, str], spec: Mapping[str, tuple[str, Callable[[str], object]]]) -> dict:
    values = {}
    for attr, (name, parse) in spec.items():
        raw = env.get(name)
        if raw is not None and raw != "":
            values[attr] = parse(raw)
    return values


def _storage(env: Mapping[str, str]) -> StorageSettings:
    spec = {
        "backend": ("STORAGE", _choice("STORAGE", ("local", "s3"))),
        "endpoint_url": ("S3_ENDPOINT_URL", _url("S3_ENDPOINT_URL", ("http", "https"))),
        "bucket": ("S3_BUCKET", _bucket),
        "region": ("S3_REGION", _text),
        "access_key_id": ("S3_ACCESS_KEY_ID", _text),
        "secret_access_key": ("S3_SECRET_ACCESS_KEY", _text),
        "prefix": ("S3_PREFIX", _prefix),
        "path_style": ("S3_PATH_STYLE", _bool("S3_PATH_STYLE")),
        "delivery": ("MEDIA_DELIVERY", _choice("MEDIA_DELIVERY", ("app", "redirect"))),
        "redirect_seconds": ("MEDIA_REDIRECT_SECONDS", _int("MEDIA_REDIRECT_SECONDS", 10, 3600)),
    }
    result = StorageSettings(**_read(env, spec))
    if result.backend == "s3" and not result.bucket:
        raise ConfigError("STORAGE=s3 needs S3_BUCKET (and S3_ENDPOINT_URL for a service other than AWS S3)")
    if bool(result.access_key_id) != bool(result.secret_access_key):
        raise ConfigError("S3_ACCESS_KEY_ID and S3_SECRET_ACCESS_KEY go together; set both, or neither to use "
                          "the machine's role")
    if result.delivery == "redirect" and result.backend != "s3":
        raise ConfigError("MEDIA_DELIVERY=redirect needs STORAGE=s3 (a local store has no presigned URLs); "
                          "use MEDIA_DELIVERY=app")
    return result


_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


def _bucket(raw: str) -> str:
    if not _BUCKET.match(raw):
        raise ConfigError(f"S3_BUCKET={raw!r} is not a bucket name; expected 3-63 lowercase letters, digits, "
                          "dots and hyphens")
    return raw


def _prefix(raw: str) -> str:
    if raw.startswith("/") or ".." in raw.split("/") or not raw.endswith("/"):
        raise ConfigError(f"S3_PREFIX={raw!r} is not a key prefix; expected a relative path ending in '/', "
                          "such as 'mediapipe/'")
    return raw


def _networks(raw: str) -> tuple[str, ...]:
    try:
        return webhook_networks(raw)
    except ValueError as exc:
        raise ConfigError(f"WEBHOOK_ALLOW_NETWORKS={raw!r}: {exc}; expected networks such as "
                          "127.0.0.0/8,10.0.0.0/8, comma-separated") from None


def _webhooks(env: Mapping[str, str], port: int) -> WebhookSettings:
    spec = {
        "workers": ("WEBHOOK_WORKERS", _int("WEBHOOK_WORKERS", 1, 1000)),
        "timeout_seconds": ("WEBHOOK_TIMEOUT_SECONDS", _float("WEBHOOK_TIMEOUT_SECONDS", 0.1, 120)),
        "retry_seconds": ("WEBHOOK_RETRY_SECONDS", _float("WEBHOOK_RETRY_SECONDS", 1, 30 * 86_400)),
        "backoff_base_seconds": ("WEBHOOK_BACKOFF_BASE_SECONDS", _float("WEBHOOK_BACKOFF_BASE_SECONDS", 0, 86_400)),
        "backoff_cap_seconds": ("WEBHOOK_BACKOFF_CAP_SECONDS", _float("WEBHOOK_BACKOFF_CAP_SECONDS", 0, 7 * 86_400)),
        "allow_networks": ("WEBHOOK_ALLOW_NETWORKS", _networks),
        "public_url": ("PUBLIC_URL", _url("PUBLIC_URL", ("http", "https"))),
    }
    values = _read(env, spec)
    values.setdefault("public_url", f"http://127.0.0.1:{port}")
    return WebhookSettings(**values)


def _tracing(env: Mapping[str, str]) -> bool:
    """Whether to trace: the OpenTelemetry SDK's own settings say where to (an OTLP endpoint) and whether it is
    switched off (OTEL_SDK_DISABLED); the SDK reads the rest of its OTEL_* settings itself."""
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    return bool(endpoint and endpoint.strip()) and env.get("OTEL_SDK_DISABLED", "").strip().lower() != "true"


def _kinds_from(raw: str) -> tuple[str, ...]:
    """KINDS_FROM: modules, comma-separated, each with a `KIND` (pipeline/core/kinds/), registered beside ours."""
    modules = tuple(m.strip() for m in raw.split(",") if m.strip())
    try:
        kinds.load(modules)
    except (ImportError, ValueError) as exc:
        raise ConfigError(f"KINDS_FROM={raw!r}: {exc}") from None
    return modules


def _kind(env: Mapping[str, str], kind: kinds.Kind) -> KindSettings:
    """<PREFIX>_ENABLED, <PREFIX>_WORKERS, <PREFIX>_INTERACTIVE_WORKERS and the kind's own <PREFIX>_<OPTION>s."""
    prefix = kind.prefix
    values = _read(env, {"enabled": (f"{prefix}_ENABLED", _bool(f"{prefix}_ENABLED")),
                         "workers": (f"{prefix}_WORKERS", _int(f"{prefix}_WORKERS", 1, 1000)),
                         "interactive_workers": (f"{prefix}_INTERACTIVE_WORKERS",
                                                 _int(f"{prefix}_INTERACTIVE_WORKERS", 1, 1000))})
    if kind.paid and values.get("enabled") is False:
        raise ConfigError(f"{prefix}_ENABLED=false: a block's {kind.medium} cannot be switched off (only a local "
                          f"kind can)")
    options = {}
    for option, (parse, default) in kind.options.items():
        name = f"{prefix}_{option.upper()}"
        raw = env.get(name, "")
        try:
            options[option] = parse(raw) if raw.strip() else default
        except ValueError as exc:
            raise ConfigError(f"{name}={raw!r}: expected {exc}") from None
    return KindSettings(values.get("enabled", kind.enabled_by_default), values.get("workers"),
                        values.get("interactive_workers"), options)


def load(env: Mapping[str, str] | None = None, *, today: date | None = None) -> Settings:
    """Build the settings from `env` (default: the process environment); `today` (default: the UTC date) decides
    which models the catalogue calls shut down."""
    env = os.environ if env is None else env
    today = datetime.now(timezone.utc).date() if today is None else today
    spec = {
        "database_url": ("DATABASE_URL", _url("DATABASE_URL", ("postgresql", "postgres"))),
        "database_session_url": ("DATABASE_SESSION_URL", _url("DATABASE_SESSION_URL", ("postgresql", "postgres"))),
        "db_pooler": ("DB_POOLER", _choice("DB_POOLER", ("none", "pgbouncer"))),
        "redis_url": ("REDIS_URL", _url("REDIS_URL", ("redis", "rediss", "unix"))),
        "redis_ca_file": ("REDIS_CA_FILE", _file("REDIS_CA_FILE")),
        "media_dir": ("MEDIA_DIR", lambda raw: Path(raw).expanduser().resolve()),
        "secret_key": ("SECRET_KEY", _secret("SECRET_KEY")),
        "port": ("PORT", _int("PORT", 1, 65535)),
        "dev_pg_port": ("DEV_PG_PORT", _int("DEV_PG_PORT", 1, 65535)),
        "dev_redis_port": ("DEV_REDIS_PORT", _int("DEV_REDIS_PORT", 1, 65535)),
        "max_pending_tasks": ("MAX_PENDING_TASKS", _int("MAX_PENDING_TASKS", 1, 100_000_000)),
        "db_statement_timeout_ms": ("DB_STATEMENT_TIMEOUT_MS", _int("DB_STATEMENT_TIMEOUT_MS", 100, 86_400_000)),
        "db_lock_timeout_ms": ("DB_LOCK_TIMEOUT_MS", _int("DB_LOCK_TIMEOUT_MS", 10, 86_400_000)),
        "db_idle_in_transaction_ms": ("DB_IDLE_IN_TRANSACTION_MS", _int("DB_IDLE_IN_TRANSACTION_MS", 100, 86_400_000)),
        "lease_seconds": ("LEASE_SECONDS", _float("LEASE_SECONDS", 0.5, 86_400)),
        "heartbeat_seconds": ("HEARTBEAT_SECONDS", _float("HEARTBEAT_SECONDS", 0.1, 3600)),
        "deadline_seconds": ("TASK_DEADLINE_SECONDS", _float("TASK_DEADLINE_SECONDS", 1, 30 * 86_400)),
        "max_attempts": ("MAX_ATTEMPTS", _int("MAX_ATTEMPTS", 1, 100)),
        "attempt_ceiling_seconds": ("ATTEMPT_CEILING_SECONDS", _float("ATTEMPT_CEILING_SECONDS", 1, 86_400)),
        "backoff_base_seconds": ("BACKOFF_BASE_SECONDS", _float("BACKOFF_BASE_SECONDS", 0, 3600)),
        "backoff_cap_seconds": ("BACKOFF_CAP_SECONDS", _float("BACKOFF_CAP_SECONDS", 0, 3600)),
        "dispatch_claim_seconds": ("DISPATCH_CLAIM_SECONDS", _float("DISPATCH_CLAIM_SECONDS", 0.1, 3600)),
        "lost_dispatch_seconds": ("LOST_DISPATCH_SECONDS", _float("LOST_DISPATCH_SECONDS", 0.1, 86_400)),
        "recovery_scan_seconds": ("RECOVERY_SCAN_SECONDS", _float("RECOVERY_SCAN_SECONDS", 0, 3600)),
        "slot_wait_seconds": ("SLOT_WAIT_SECONDS", _float("SLOT_WAIT_SECONDS", 1, 3600)),
        "reconcile_slot_seconds": ("RECONCILE_SLOT_SECONDS", _int("RECONCILE_SLOT_SECONDS", 1, 86_400)),
        "bulk_queue_depth": ("BULK_QUEUE_DEPTH", _int("BULK_QUEUE_DEPTH", 1, 100_000)),
        "image_bulk_backend": ("IMAGE_BULK_BACKEND", _choice("IMAGE_BULK_BACKEND", ("sync", "batch"))),
        "image_batch_max_lines": ("IMAGE_BATCH_MAX_LINES", _int("IMAGE_BATCH_MAX_LINES", 1, 50_000)),
        "image_batch_gather_seconds": ("IMAGE_BATCH_GATHER_SECONDS",
                                       _float("IMAGE_BATCH_GATHER_SECONDS", 0, 86_400)),
        "image_batch_poll_seconds": ("IMAGE_BATCH_POLL_SECONDS", _float("IMAGE_BATCH_POLL_SECONDS", 0.05, 3600)),
        "media_retention_days": ("MEDIA_RETENTION_DAYS", _int("MEDIA_RETENTION_DAYS", 1, 36_500)),
        "demo_mode": ("DEMO_MODE", _bool("DEMO_MODE")),
        "allow_self_approval": ("ALLOW_SELF_APPROVAL", _bool("ALLOW_SELF_APPROVAL")),
        "session_idle_seconds": ("SESSION_IDLE_SECONDS", _float("SESSION_IDLE_SECONDS", 10, 30 * 86_400)),
        "session_max_seconds": ("SESSION_MAX_SECONDS", _float("SESSION_MAX_SECONDS", 10, 90 * 86_400)),
        "trusted_proxies": ("TRUSTED_PROXIES", _int("TRUSTED_PROXIES", 0, 5)),
        "web_request_seconds": ("WEB_REQUEST_SECONDS", _float("WEB_REQUEST_SECONDS", 1, 3600)),
        "media_url_ttl_seconds": ("MEDIA_URL_TTL_SECONDS", _int("MEDIA_URL_TTL_SECONDS", 60, 30 * 86_400)),
        "media_link_cache": ("MEDIA_LINK_CACHE", _choice("MEDIA_LINK_CACHE", ("private", "public"))),
        "metrics_token": ("METRICS_TOKEN", _secret("METRICS_TOKEN")),
        "key_max_pending_tasks": ("KEY_MAX_PENDING_TASKS", _int("KEY_MAX_PENDING_TASKS", 1, 100_000_000)),
        "key_saves_per_minute": ("KEY_SAVES_PER_MINUTE", _int("KEY_SAVES_PER_MINUTE", 1, 1_000_000)),
        "bulk_save_blocks": ("BULK_SAVE_BLOCKS", _int("BULK_SAVE_BLOCKS", 1, 100_000)),
        "lab_api_key": ("LAB_API_KEY", _secret("LAB_API_KEY")),
        "content_budget": ("CONTENT_BUDGET", _float("CONTENT_BUDGET", 0, 1e9)),
        "key_daily_spend": ("KEY_DAILY_SPEND", _budget("KEY_DAILY_SPEND")),
        "team_daily_spend": ("TEAM_DAILY_SPEND", _budget("TEAM_DAILY_SPEND")),
        "budget_recheck_seconds": ("BUDGET_RECHECK_SECONDS", _float("BUDGET_RECHECK_SECONDS", 0.1, 86_400)),
    }
    values = _read(env, spec)
    values["kinds_from"] = _kinds_from(env.get("KINDS_FROM", ""))
    base = Settings()
    values["providers"] = {kind.name: _provider(env, kind, base.providers.get(kind.name) or ProviderSettings(
        **kind.provider_defaults), today) for kind in kinds.paid()}
    values["kinds"] = {kind.name: _kind(env, kind) for kind in kinds.every()}
    if "attempt_ceiling_seconds" not in values:   # long enough for the slowest call the providers allow
        values["attempt_ceiling_seconds"] = max(p.call_timeout for p in values["providers"].values()) + 60
    values["storage"] = _storage(env)
    values["webhooks"] = _webhooks(env, values.get("port", base.port))
    values["tracing"] = _tracing(env)
    values.setdefault("allow_self_approval", values.get("demo_mode", False))   # the seed demo approves its own save
    settings = Settings(**values)
    if settings.image_bulk_backend == "batch" and settings.providers["image"].backend != "openai":
        raise ConfigError(f"IMAGE_BULK_BACKEND=batch sends bulk images through the OpenAI Batch API: it needs "
                          f"IMAGE_PROVIDER=openai (it is {settings.providers['image'].backend})")
    if settings.heartbeat_seconds >= settings.lease_seconds:
        raise ConfigError(
            f"HEARTBEAT_SECONDS={settings.heartbeat_seconds} must be shorter than LEASE_SECONDS={settings.lease_seconds}, "
            "or leases expire between heartbeats"
        )
    return settings
