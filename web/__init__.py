"""The Flask app: editors' UI and JSON API. Views parse input, call `pipeline`, render.

`create_app(test_config=None)` builds an app from `pipeline.settings.load()`;
tests pass a mapping of environment-style overrides instead.
"""

from __future__ import annotations

import uuid
from datetime import date, datetime
from decimal import Decimal
from typing import Any, Mapping

from flask import Flask
from flask.json.provider import DefaultJSONProvider

from pipeline import settings as settings_mod


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
    app = Flask(__name__)
    app.json = JSONProvider(app)
    app.config["SETTINGS"] = cfg
    app.config.update(SECRET_KEY=cfg.secret_key, SESSION_COOKIE_HTTPONLY=True, SESSION_COOKIE_SAMESITE="Lax",
                      SESSION_COOKIE_NAME="mediapipe_session")
    from web import api, db, errors, health, inputs, media, metrics, openapi, present, ui
    from web import api_tasks, ui_actions  # noqa: F401 - their views join the api and ui blueprints
    db.init_app(app)
    inputs.init_app(app)
    errors.init_app(app)
    present.init_app(app)
    app.register_blueprint(health.bp)
    health.init_app(app)
    for blueprint in (api.bp, media.bp, metrics.bp, openapi.bp, ui.bp):
        app.register_blueprint(blueprint)
    return app
