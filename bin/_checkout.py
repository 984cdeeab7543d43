"""What every Python command in bin/ does first: find this checkout's code, and its `.venv` when it has one.

Started from a checkout (by hand, or by cron with a bare PATH), a command runs again under the checkout's
`.venv` interpreter (the one bin/dev and bin/test set up), where the dependencies are. Where there is no
`.venv` (an image with the dependencies installed system-wide), it goes on with the Python that started it.
`VENV` names another virtualenv. A command that talks to the servers, started without DATABASE_URL and
REDIS_URL beside a running bin/dev, takes the dev stack's (bin/devenv.py). Only the standard library, so any
Python 3 can get this far.
"""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def prepare(*, dev_stack: bool = False) -> None:
    """Run under the checkout's .venv; with `dev_stack` (a command that talks to the servers), take a running
    bin/dev's servers when neither DATABASE_URL nor REDIS_URL is set (bin/devenv.py), saying so on stderr."""
    venv = Path(os.environ.get("VENV") or ROOT / ".venv")
    python = venv / "bin" / "python"
    if python.exists() and Path(sys.prefix).resolve() != venv.resolve():
        os.execv(str(python), [str(python), *sys.argv])
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    if dev_stack and not {"-h", "--help"} & set(sys.argv[1:]):
        from bin import devenv
        devenv.adopt(os.environ, f"bin/{Path(sys.argv[0]).name}")
