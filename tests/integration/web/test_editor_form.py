"""The editor's form is bounded before any work: rows over the limit are refused by count, keys are filled from a
counter, and no form makes the web answer 500."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from pipeline.core.content import MAX_BLOCKS
from testkit.pages import post, sign_in


@pytest.fixture
def editor(app, tokens):
    client = app.test_client()
    return client, sign_in(client, tokens["editor"])


def test_ten_thousand_keyless_rows_are_refused_at_once_by_their_count(editor, conn):
    client, csrf = editor
    n = 10_001
    started = time.monotonic()
    response = post(client, csrf, "/contents/new", title="big", locale="en-US", block_key=[""] * n,
                    block_text=["x"] * n, block_prompt=[""] * n)
    spent = time.monotonic() - started
    assert response.status_code == 422
    assert f"{n} blocks; the limit is {MAX_BLOCKS}" in response.get_data(as_text=True)
    assert spent < 2, f"the refusal took {spent:.1f} s"
    assert conn.execute("SELECT count(*) AS n FROM versions").fetchone()["n"] == 0


def test_keyless_rows_get_the_first_free_keys_in_order(editor, conn):
    client, csrf = editor
    response = post(client, csrf, "/contents/new", title="keys", locale="en-US", block_key=["b2", "", "", "b1x"],
                    block_text=["two", "first free", "next free", "own"], block_prompt=["", "", "", ""])
    assert response.status_code == 303, response.get_data(as_text=True)
    blocks = conn.execute("SELECT blocks FROM versions WHERE version = 1").fetchone()["blocks"]
    assert [b["key"] for b in blocks] == ["b2", "b1", "b3", "b1x"]


rows = st.lists(st.tuples(st.text(max_size=8), st.text(max_size=30), st.text(max_size=10)), max_size=MAX_BLOCKS + 3)


@hsettings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=rows, title=st.text(max_size=20), locale=st.sampled_from(["en-US", "zh-CN", "", "x" * 40]),
       ragged=st.integers(min_value=0, max_value=2))
def test_no_editor_form_makes_the_web_answer_500(editor, rows, title, locale, ragged):
    client, csrf = editor
    keys, texts, prompts = ([r[i] for r in rows] for i in range(3))
    keys = keys[: len(keys) - ragged] if ragged else keys   # lists of unequal length, as a forged form sends
    response = post(client, csrf, "/contents/new", title=title, locale=locale, block_key=keys, block_text=texts,
                    block_prompt=prompts)
    assert response.status_code in (303, 409, 422, 429, 503), response.get_data(as_text=True)[:500]
