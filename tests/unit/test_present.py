"""The board says a task's last error in words chosen by its decision's code, never by searching the text."""

from pipeline.core.outcome import Reason
from web.present import ERROR_WORDS, error_in_words


def test_every_code_that_records_an_error_has_words():
    # the codes of successes and reuses never record an error
    assert set(ERROR_WORDS) == {r.value for r in Reason} - {"succeeded", "reused", "recovered"}


def test_the_words_come_from_the_code_and_the_details_from_the_text():
    said = error_in_words("Transient: the provider was busy (503)", "transient")
    assert said.startswith("The request never reached the provider.") and said.endswith("busy (503)")


def test_an_error_without_a_code_is_shown_as_it_was_recorded():
    assert error_in_words("Permanent: refused", None) == "Permanent: refused"
    assert error_in_words(None, "transient") == ""
