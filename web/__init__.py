"""The Flask app: editors' UI and JSON API. Views parse input, call `pipeline`, render.

`create_app(test_config=None)` builds an app from `pipeline.settings.load()`;
tests pass a mapping of environment-style overrides instead. There is no default
secret: without a SECRET_KEY of at least 32 characters the app refuses to start.
"""

from __future__ import annotations

import uuid
from datetime import date, datetime
from decimal import Decimal
from typing import Any, Mapping

from flask import Flask
from flask.json.provider import DefaultJSONProvider

from pipeline import settings as settings_mod
from pipeline.core.errors import ConfigError


class JSONProvider(DefaultJSONProvider):
    """ISO 8601 times (Flask's default is an HTTP date), numbers for money, text for UUIDs."""

    ensure_ascii = False
    sort_keys = False

    @staticmethod
    def default(o: Any) -> Any:
        if isinstance(o, (datetime, date)):
            return o.isoformat()
        if isinstance(o, Decimal):
            return float(o)
        if isinstance(o, uuid.UUID):
            return str(o)
        return DefaultJSONProvider.default(o)


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
    from web import api, db, errors, health, i18n, inputs, media, metrics, openapi, present, requestid, security
    from web import sessions, ui
    from web import api_review, api_tasks, spend, ui_actions, ui_review  # noqa: F401 - their views join the api and ui blueprints
    requestid.init_app(app, cfg.trusted_proxies)   # first, so even a refused request has its id
    security.init_app(app, cfg.trusted_proxies)
    sessions.init_app(app)
    db.init_app(app)
    inputs.init_app(app)
    errors.init_app(app)
    present.init_app(app)
    i18n.init_app(app)
    app.register_blueprint(health.bp)
    health.init_app(app)
    for blueprint in (api.bp, media.bp, metrics.bp, openapi.bp, ui.bp):
        app.register_blueprint(blueprint)
    return app
