"""The Flask app: editors' UI and JSON API. Views parse input, call `pipeline`, render.

`create_app(test_config=None)` builds an app from `pipeline.settings.load()`;
tests pass a mapping of environment-style overrides instead.
"""

from __future__ import annotations

from typing import Mapping

from flask import Flask

from pipeline import settings as settings_mod


def create_app(test_config: Mapping[str, str] | None = None) -> Flask:
    cfg = settings_mod.load(test_config)
    app = Flask(__name__)
    app.config["SETTINGS"] = cfg
    app.config["SECRET_KEY"] = cfg.secret_key
    from web import health
    app.register_blueprint(health.bp)
    health.init_app(app)
    return app
