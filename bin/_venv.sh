# Sourced by bin/dev and bin/test: make sure .venv exists and holds requirements-dev.lock, the hash-pinned lock
# that pip-compile generates from requirements-dev.txt (which includes requirements.txt; regenerate with the
# command in the lock's header). The lock names every transitive dependency, so pip installs it with --no-deps:
# nothing is resolved or fetched beyond what it lists, and --require-hashes refuses any file whose hash differs.
# A stamp of the requirement and lock files' hash skips the install when nothing changed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
PYTHON_BIN="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON_BIN" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || { echo "bin: Python 3.11 or newer is needed (found: $($PYTHON_BIN --version 2>&1)); set PYTHON=/path/to/python3.11" >&2; exit 1; }
  "$PYTHON_BIN" -m venv "$VENV"
fi
stamp="$VENV/.requirements.sha256"
want="$(cat "$ROOT/requirements.txt" "$ROOT/requirements-dev.txt" "$ROOT/requirements.lock" "$ROOT/requirements-dev.lock" \
  | sha256sum | cut -d' ' -f1)"
pip_lock() {
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps --no-compile \
    -r "$1"
}
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  # uv installs the lock, many packages at once (4 to 12 s here where pip took 54 to 65 s); pip installs uv first,
  # from the lock's own pin and hashes, and the whole lock itself where uv cannot
  uv_pin="$(mktemp)"
  awk '/^uv==/ { on = 1 } on { print } on && !/\\$/ { exit }' "$ROOT/requirements-dev.lock" > "$uv_pin"
  if ! { pip_lock "$uv_pin" && "$VENV/bin/python" -m uv pip install --quiet --python "$VENV/bin/python" \
           --require-hashes --no-deps -r "$ROOT/requirements-dev.lock"; }; then
    echo "bin: uv could not install requirements-dev.lock; pip installs it" >&2
    pip_lock "$ROOT/requirements-dev.lock"
  fi
  rm -f "$uv_pin"
  echo "$want" > "$stamp"
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
cd "$ROOT"
