"""What every answer carries, and who is really calling: security headers, the trusted proxy, loopback.

Every answer (HTML pages above all) gets a Content-Security-Policy that allows only this
origin and no framing, `X-Frame-Options: DENY`, `X-Content-Type-Options: nosniff` and
`Referrer-Policy: same-origin`; over https also `Strict-Transport-Security`. Every page and JSON
answer that sets no `Cache-Control` of its own gets `no-store` (media set theirs: web/media.py).

Behind a TLS-terminating reverse proxy, `TRUSTED_PROXIES=N` (the number of proxies in
front of the app) lets Werkzeug's ProxyFix take the client address, scheme, host and
port from the `X-Forwarded-*` headers those proxies set. It is off (0) by default: a
client could send those headers itself, so they are only believed when a proxy you run
overwrites them. With it on, the app sees https, and session cookies become `Secure`
with the `__Host-` prefix.
"""

from __future__ import annotations

import hmac
import ipaddress

from flask import Flask, request
from werkzeug.middleware.proxy_fix import ProxyFix
from werkzeug.wrappers import Response

CSP = ("default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'; "
       "object-src 'none'")
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}
HSTS = "max-age=31536000"
# Headers that mean a proxy stands between the caller and us (or a caller pretends one does).
PROXY_HEADERS = ("X-Forwarded-For", "X-Real-IP", "Forwarded", "X-Forwarded-Host", "X-Forwarded-Proto")
LOOPBACK_NAMES = {"localhost"}


def _headers(response: Response) -> Response:
    for name, value in HEADERS.items():
        response.headers.setdefault(name, value)
    if "Cache-Control" not in response.headers and _page_or_data(response.mimetype or ""):
        # drafts, prompts, receipts, keys' pages: nothing a shared cache (or the browser's disk) may keep
        response.headers["Cache-Control"] = "no-store"
    if request.is_secure:
        response.headers.setdefault("Strict-Transport-Security", HSTS)
    return response


def _page_or_data(mimetype: str) -> bool:
    return mimetype == "text/html" or mimetype.endswith("json")


def _loopback_address(text: str) -> bool:
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    return address.is_loopback


def loopback_host(host: str) -> bool:
    """Whether a Host header names this machine (`localhost`, 127.0.0.1, [::1], with any port)."""
    host = host.strip().lower()
    if host.startswith("["):
        name = host[1:host.find("]")] if "]" in host else ""
    else:
        name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    return name in LOOPBACK_NAMES or _loopback_address(name)


def bearer_matches(token: str | None) -> bool:
    """The request carries `Authorization: Bearer <token>` for this (set) token."""
    scheme, _, sent = request.headers.get("Authorization", "").partition(" ")
    return bool(token) and scheme.lower() == "bearer" and hmac.compare_digest(sent.strip().encode(), token.encode())


def direct_loopback() -> bool:
    """The caller is on this machine and talks to us directly: a loopback peer, a loopback Host,
    and no proxy header at all (a local reverse proxy would make every caller look local; a web
    page reaching us through DNS rebinding sends its own host name)."""
    if any(name in request.headers for name in PROXY_HEADERS):
        return False
    return _loopback_address(request.remote_addr or "") and loopback_host(request.host or "")


def init_app(app: Flask, trusted_proxies: int) -> None:
    if trusted_proxies:
        n = trusted_proxies
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=n, x_proto=n, x_host=n, x_port=n)  # type: ignore[method-assign]
    app.after_request(_headers)
