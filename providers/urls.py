"""Provider base URLs: the two spellings users write, and the rule about plain http.

OpenAI's SDKs and most OpenAI-compatible servers document the base URL with its
version (`https://api.openai.com/v1`); others write the bare host. Both name the
same API root here. A Bearer key travels in every request, so plain `http://` is
accepted only for a server on this machine. Pure functions, no I/O.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit


class UnsafeBaseURL(ValueError):
    """A base URL that would send the API key in clear text over a network."""


def is_loopback(host: str) -> bool:
    """True for localhost, 127.0.0.0/8 and ::1."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_scheme(base_url: str) -> str:
    """`base_url` if it is https://, or http:// to this machine; UnsafeBaseURL otherwise."""
    parts = urlsplit(base_url)
    if parts.scheme == "https":
        return base_url
    if parts.scheme == "http" and is_loopback(parts.hostname or ""):
        return base_url
    if parts.scheme == "http":
        raise UnsafeBaseURL(f"{base_url!r} would send the API key in clear text; use https:// "
                            "(plain http:// is allowed only for a server on this machine: localhost, 127.x, ::1)")
    raise UnsafeBaseURL(f"{base_url!r} is not an http(s) URL; write it as https://HOST[/v1]")


def api_root(base_url: str) -> str:
    """The URL that `/v1/...` paths are appended to: `.../v1` and `...` name the same root."""
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root
