"""The board says a task's last error in words chosen by its decision's code, never by searching the text."""

from pipeline.core.outcome import Reason
from web.present import ERROR_WORDS, error_in_words


def test_every_code_that_records_an_error_has_words():
    # the codes of successes and reuses never record an error
    assert set(ERROR_WORDS) == {r.value for r in Reason} - {"succeeded", "reused", "recovered"}


def test_the_words_come_from_the_code_and_the_details_from_the_text_folded_away():
    said = error_in_words("Transient: the provider was busy (503)", "transient")
    assert said.startswith("The request never reached the provider <details class=\"raw\">")
    assert said.endswith("<code>Transient: the provider was busy (503)</code></details>")


def test_an_error_without_a_code_is_shown_as_it_was_recorded_under_general_words():
    said = error_in_words("Permanent: <refused>", None)
    assert said.startswith("The last attempt ended with an error <details")
    assert "<code>Permanent: &lt;refused&gt;</code>" in said   # the text as recorded, escaped
    assert error_in_words(None, "transient") == ""
