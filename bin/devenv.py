"""The dev stack's environment file: bin/dev writes it, the other bin/ commands of the checkout read it.

While bin/dev runs, `<DEV_DATA_DIR>/dev.env` (default `.data/dev.env`, mode 0600) holds what it decided for its
processes: the servers' URLs (Redis with the password it made for this start), the media folder, demo mode, the
admin key and the web app's URL, as `export NAME='value'` lines a shell can source. A command started without
DATABASE_URL and REDIS_URL (a second shell in the checkout, beside bin/dev) takes from it what its environment
lacks, and says so on stderr, so the documented commands work as typed. bin/dev removes the file when it stops.

Only the standard library (bin/import uses it too); it reads no environment of its own: callers pass theirs.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from collections.abc import Mapping, MutableMapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FILE_NAME = "dev.env"
# What a command needs to find the stack; the file is read only when both are unset.
SERVERS = ("DATABASE_URL", "REDIS_URL")


def data_dir(environ: Mapping[str, str]) -> Path:
    """Where bin/dev keeps its servers' data, secrets, media and this file: DEV_DATA_DIR, else `.data`."""
    return Path(environ.get("DEV_DATA_DIR") or ROOT / ".data").expanduser().resolve()


def path(environ: Mapping[str, str]) -> Path:
    return data_dir(environ) / FILE_NAME


def write(target: Path, values: Mapping[str, str]) -> None:
    """Write the file owner-only, whole or not at all (temp file, then rename)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    lines = [f"# bin/dev's stack, started {stamp} (process {os.getpid()}); removed when it stops.",
             "# bin/ commands of this checkout read it when DATABASE_URL and REDIS_URL are unset.",
             f"# For curl, psql or redis-cli in a shell: . {target}",
             *(f"export {name}={shlex.quote(value)}" for name, value in values.items())]
    temp = target.with_name(f".{target.name}.{os.getpid()}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write("\n".join(lines) + "\n")
    os.replace(temp, target)


def read(source: Path) -> dict[str, str]:
    """The `export NAME=value` lines of the file (comments and anything else skipped)."""
    found = {}
    for line in source.read_text().splitlines():
        words = shlex.split(line, comments=True)
        if len(words) == 2 and words[0] == "export" and "=" in words[1]:
            name, _, value = words[1].partition("=")
            found[name] = value
    return found


def remove(target: Path) -> None:
    try:
        target.unlink()
    except FileNotFoundError:
        pass


def adopt(environ: MutableMapping[str, str], tool: str) -> list[str]:
    """With neither DATABASE_URL nor REDIS_URL in `environ`, fill what it lacks from a running bin/dev's file and
    say so on stderr; the names taken (none without a file, or when either server is named)."""
    if any(environ.get(name) for name in SERVERS):
        return []
    source = path(environ)
    try:
        values = read(source)
    except (FileNotFoundError, NotADirectoryError):
        return []
    except (OSError, ValueError) as exc:
        print(f"{tool}: cannot read {source}: {exc}", file=sys.stderr)
        return []
    taken = [name for name, value in values.items() if not environ.get(name)]
    for name in taken:
        environ[name] = values[name]
    if taken:
        print(f"{tool}: DATABASE_URL and REDIS_URL are not set: using bin/dev's stack from {source} "
              f"({', '.join(taken)})", file=sys.stderr)
    return taken


def missing(name: str, environ: Mapping[str, str]) -> str:
    """The one line a command says when a server's URL is not set."""
    return (f"{name} is not set: start bin/dev in this checkout (its commands then read {path(environ)}), "
            f"or set {name} to your own server")
