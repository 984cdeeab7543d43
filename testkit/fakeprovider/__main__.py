"""Run the fake in the foreground: `python -m testkit.fakeprovider [PORT]`."""

from __future__ import annotations

import sys

from .server import FakeProviderServer


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    server = FakeProviderServer(int(args[0]) if args else 0).start()
    print(f"fake provider listening on {server.base_url}", flush=True)
    try:
        server.wait_stopped()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
