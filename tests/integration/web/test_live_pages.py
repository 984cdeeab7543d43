"""The parts of pages that follow the server: the task page's fragment, asked for every 2 s by the page's script
(the browser walk is tests/acceptance/test_browser_task_page.py)."""

from __future__ import annotations

from pipeline.core.errors import Ambiguous
from testkit.pages import page, post, sign_in


def test_the_task_fragment_follows_the_task_and_drops_the_consent_form_once_the_retry_is_taken(app, api, work,
                                                                                               tokens):
    created = api.create(1)
    image = api.tasks_of(created)["image:b1"]
    work.executor.script[image["id"]] = [Ambiguous("lost")]
    work.until_idle()
    client = app.test_client()
    csrf = sign_in(client, tokens["editor"])
    live = f"/tasks/{image['id']}/live"
    assert f'data-live-url="{live}"' in page(client, f"/tasks/{image['id']}")
    fragment = page(client, live)
    assert 'data-status="unknown"' in fragment and 'data-live="true"' in fragment
    assert 'name="accept_duplicate_risk"' in fragment and "<html" not in fragment
    post(client, csrf, f"/tasks/{image['id']}/retry", accept_duplicate_risk="yes", back="task")
    fragment = page(client, live)
    assert 'data-status="ready"' in fragment and 'name="accept_duplicate_risk"' not in fragment
    work.until_idle()
    fragment = page(client, live)
    assert 'data-status="succeeded"' in fragment and 'data-live="false"' in fragment
    # signed out, the fragment is no more open than the page
    assert app.test_client().get(live).status_code in (302, 303, 401)
