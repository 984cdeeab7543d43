"""The Flask app: editors' UI and JSON API. Views parse input, call `pipeline`, render.

One module per area holds that area's JSON API (the `api` blueprint, under /api) and its pages (the `ui`
blueprint) side by side: contents, review, tasks, attention, spend; auth signs people in and out, i18n
switches their language and time zone, webhooks lets admins register the endpoints other systems are told through.
media, health, metrics and openapi answer programs and monitors.
What the pages of several areas share is in web.pages, what their new work shares in web.work.
`create_app` registers every blueprint itself.

`create_app(test_config=None)` builds an app from `pipeline.settings.load()`;
tests pass a mapping of environment-style overrides instead. There is no default
secret: without a SECRET_KEY of at least 32 characters the app refuses to start.
"""

from __future__ import annotations

import uuid
from datetime import date, datetime
from decimal import Decimal
from typing import Any, Mapping

from flask import Blueprint, Flask
from flask.json.provider import DefaultJSONProvider

from pipeline import settings as settings_mod
from pipeline import tracing
from pipeline.core.errors import ConfigError


class JSONProvider(DefaultJSONProvider):
    """ISO 8601 times (Flask's default is an HTTP date), numbers for money, text for UUIDs; a request's 3.0 is
    the whole number 3."""

    ensure_ascii = False
    sort_keys = False

    def loads(self, s: str | bytes, **kwargs: Any) -> Any:
        # JSON has one kind of number, and the OpenAPI document (JSON Schema) counts 3.0 as a whole number
        return super().loads(s, parse_float=whole_or_float, **kwargs)

    @staticmethod
    def default(o: Any) -> Any:
        if isinstance(o, (datetime, date)):
            return o.isoformat()
        if isinstance(o, Decimal):
            return float(o)
        if isinstance(o, uuid.UUID):
            return str(o)
        return DefaultJSONProvider.default(o)


def whole_or_float(text: str) -> int | float:
    """A JSON number written with a fraction or an exponent: an int when it is whole (float's precision: no
    number has to be spelled out digit by digit, so 1e999999 cannot cost a CPU)."""
    value = float(text)
    return int(value) if value.is_integer() else value


def create_app(test_config: Mapping[str, str] | None = None) -> Flask:
    cfg = settings_mod.load(test_config)
    if not cfg.secret_key:
        raise ConfigError("SECRET_KEY is not set: the web app signs media links and sign-in forms with it and "
                          f"will not start without one of at least {settings_mod.MIN_SECRET} random characters; "
                          f"make one with {settings_mod.MAKE_SECRET} and keep it secret (bin/dev keeps its own "
                          "in .data/secret-key)")
    app = Flask(__name__)
    app.json = JSONProvider(app)
    app.config["SETTINGS"] = cfg
    # gunicorn builds the app in each worker it forked (no preload), where the SDK's export thread then lives
    tracing.setup(cfg.tracing, "mediapipe-web")
    tracing.instrument_flask(app)
    from web import attention, auth, contents, contract, db, errors, health, i18n, inputs, media, metrics
    from web import openapi, pages, present, requestid, review, security, sessions, spend, tasks, webhooks
    requestid.init_app(app, cfg.trusted_proxies)   # first, so even a refused request has its id
    security.init_app(app, cfg.trusted_proxies)
    sessions.init_app(app)
    db.init_app(app)
    inputs.init_app(app)
    contract.init_app(app)   # every documented operation's query and body, as web.openapi says
    errors.init_app(app)
    present.init_app(app)
    i18n.init_app(app)
    app.register_blueprint(health.bp)
    health.init_app(app)
    api = Blueprint("api", __name__, url_prefix="/api")   # for programs: a key on every call (web.auth.require)
    ui = Blueprint("ui", __name__)                        # for people: a signed-in session, CSRF on every post
    ui.before_request(pages.guard)
    ui.app_context_processor(pages.template_globals)
    for area in (contents, review, tasks, attention, spend):
        api.register_blueprint(area.api)
        ui.register_blueprint(area.ui)
    ui.register_blueprint(auth.ui)
    ui.register_blueprint(webhooks.ui)
    ui.register_blueprint(i18n.ui)
    for blueprint in (api, media.bp, metrics.bp, openapi.bp, ui):
        app.register_blueprint(blueprint)
    return app
