"""The dependencies are locked with hashes: every package the runtime and the tests install, transitive ones
included, pinned to one version with its sha256 hashes, and installed that way by the README's commands."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\]+)")


def entries(lock: Path) -> dict[str, list[str]]:
    """package -> the hashes of its pinned version, from a pip-compile --generate-hashes lock."""
    found: dict[str, list[str]] = {}
    current = None
    for line in lock.read_text().splitlines():
        match = PIN.match(line)
        if match:
            current = match[1].lower().replace("_", "-")
            found[current] = []
        elif current and line.strip().startswith("--hash=sha256:"):
            found[current].append(line.strip().removeprefix("--hash=sha256:").rstrip(" \\"))
        elif line and not line.startswith((" ", "#")):
            raise AssertionError(f"{lock.name}: a line that is neither a pin nor a hash: {line!r}")
    return found


def direct(requirements: Path) -> set[str]:
    names = set()
    for line in requirements.read_text().splitlines():
        match = PIN.match(line.strip())
        if match:
            names.add(re.sub(r"\[.*\]", "", match[1]).lower().replace("_", "-"))
    return names


def test_every_locked_package_has_one_version_and_its_hashes():
    for lock in ("requirements.lock", "requirements-dev.lock"):
        found = entries(ROOT / lock)
        assert len(found) >= 30, lock
        for name, hashes in found.items():
            assert hashes and all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes), (lock, name)


def test_the_locks_cover_the_readable_requirement_files_with_the_same_versions():
    runtime, dev = entries(ROOT / "requirements.lock"), entries(ROOT / "requirements-dev.lock")
    assert direct(ROOT / "requirements.txt") <= set(runtime)
    assert direct(ROOT / "requirements-dev.txt") | set(runtime) <= set(dev)
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        match = PIN.match(line.strip())
        if match:
            name = re.sub(r"\[.*\]", "", match[1]).lower().replace("_", "-")
            locked = next(PIN.match(l) for l in (ROOT / "requirements.lock").read_text().splitlines()
                          if PIN.match(l) and PIN.match(l)[1].lower().replace("_", "-") == name)
            assert locked[2] == match[2], name


def test_the_readme_commands_install_the_lock_requiring_hashes():
    venv = (ROOT / "bin" / "_venv.sh").read_text()
    assert "--require-hashes" in venv and "requirements-dev.lock" in venv


def test_the_locks_hold_what_every_python_3_11_needs_not_only_the_one_that_compiled_them():
    # a dependency under a marker such as python_full_version < "3.11.3" (redis and valkey need async-timeout
    # there) is dropped by a lock compiled on a newer Python, and --no-deps then installs without it
    from importlib import metadata
    from packaging.markers import default_environment
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    oldest = {**default_environment(), "python_full_version": "3.11.0", "python_version": "3.11", "extra": ""}
    for lock in ("requirements.lock", "requirements-dev.lock"):
        locked = {canonicalize_name(name) for name in entries(ROOT / lock)}
        for name in locked:
            try:
                requires = metadata.requires(name) or []
            except metadata.PackageNotFoundError:   # the runtime lock's packages are all in the dev venv
                continue
            for text in requires:
                requirement = Requirement(text)
                if requirement.marker is None or requirement.marker.evaluate(oldest):
                    assert canonicalize_name(requirement.name) in locked, (lock, name, text)
