"""The rule for a request's id: the caller's only from a trusted proxy and only when sane."""

from __future__ import annotations

import pytest

from web.requestid import request_id


@pytest.mark.parametrize("sent, trusted, kept", [("abcd-1234", True, True), ("abcd-1234", False, False),
                                                 (None, True, False), ("a b c d e f", True, False),
                                                 ("x" * 65, True, False), ("lb:2026.a_b-c", True, True)])
def test_a_sent_request_id_is_kept_only_from_a_trusted_proxy_and_only_when_sane(sent, trusted, kept):
    assert (request_id(sent, trusted) == sent) is kept
    assert len(request_id(None, False)) == 32
