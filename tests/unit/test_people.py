"""Owners are compared as people are: letter case, full-width letters and surrounding spaces do not make two."""

from pipeline.core.people import person, same_person


def test_one_person_under_other_letters_is_one_person():
    assert same_person("alice@example.com", "ALICE@example.com")
    assert same_person("alice@example.com", " ａｌｉｃｅ@example.com ")
    assert same_person("STRASSE", "straße")                 # case-folding, not lower()
    assert person("Ｂｏｂ") == "bob"


def test_different_people_and_missing_names_are_not_the_same():
    assert not same_person("alice@example.com", "alicia@example.com")
    assert not same_person(None, "alice@example.com") and not same_person(None, None)
