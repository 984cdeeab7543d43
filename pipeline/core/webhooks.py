"""Webhooks: the rules, without I/O. Which events exist, how a message is signed (the Standard Webhooks
specification), what an endpoint's URL may be, when a failed message is tried again, and what its body says.

Signing is ours, a few lines of the standard library, and the tests verify it with the `standardwebhooks`
reference library, as a receiver would (docs/decisions.md, "Webhooks"). An endpoint's secret is derived from
SECRET_KEY and a salt stored with the endpoint, so the database alone signs nothing. The I/O lives in
pipeline/webhooks.py (endpoints), pipeline/webhook_delivery.py (sending) and pipeline/webhook_http.py (the request).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Iterable, Mapping, Sequence
from urllib.parse import urlsplit

from pipeline.core.errors import InvalidInput

EVENT_TYPES = ("version.completed", "version.deliverable", "version.withdrawn", "task.needs_attention",
               "budget.reached")   # the same list is a CHECK in schema/0028_webhooks.sql
SECRET_PREFIX = "whsec_"
MAX_URL = 2000
# Cloud metadata services: never a receiver, whatever WEBHOOK_ALLOW_NETWORKS allows.
METADATA = frozenset(ipaddress.ip_address(a) for a in ("169.254.169.254", "169.254.170.2", "fd00:ec2::254",
                                                          "100.100.100.200"))


class UnsafeURL(InvalidInput):
    """An endpoint URL we will not send to: its scheme, its form or an address its host resolves to."""

    def __init__(self, message: str) -> None:
        super().__init__(message, field="url")


# -- secrets and signatures ----------------------------------------------------------------------

def secret(secret_key: str, salt: str) -> str:
    """An endpoint's signing secret, `whsec_` and 32 bytes in base64: an HMAC of its salt under a key derived from
    SECRET_KEY (so rotating SECRET_KEY changes every endpoint's secret)."""
    key = hmac.new(secret_key.encode(), b"mediapipe webhook secrets", hashlib.sha256).digest()
    return SECRET_PREFIX + base64.b64encode(hmac.new(key, salt.encode(), hashlib.sha256).digest()).decode()


def signature(secret_text: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """`v1,` and the base64 HMAC-SHA256 of `id.timestamp.body` under the secret's bytes (Standard Webhooks)."""
    key = base64.b64decode(secret_text.removeprefix(SECRET_PREFIX))
    signed = f"{msg_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


def headers(msg_id: str, timestamp: int, body: bytes, secrets: Sequence[str]) -> dict[str, str]:
    """The headers of one attempt: its id (the same on every attempt), its time, and a signature per secret (the
    current one, and during a rotation's overlap the previous one), space-separated."""
    return {"webhook-id": msg_id, "webhook-timestamp": str(timestamp),
            "webhook-signature": " ".join(signature(s, msg_id, timestamp, body) for s in secrets),
            "content-type": "application/json", "user-agent": "mediapipe-webhooks/1"}


def message_id(delivery_id: int) -> str:
    return f"msg_{delivery_id}"


# -- the events a consumer asked for -------------------------------------------------------------

def event_types(asked: Iterable[str] | str | None) -> list[str]:
    """The event types an endpoint wants, checked, in the order of EVENT_TYPES; none asked: all of them."""
    if asked is None or asked == "" or asked == []:
        return list(EVENT_TYPES)
    names = [a.strip() for a in (asked.split(",") if isinstance(asked, str) else asked) if a and a.strip()]
    unknown = sorted(set(names) - set(EVENT_TYPES))
    if unknown or not names:
        raise InvalidInput(f"unknown event type {', '.join(unknown) or '(none)'}; choose among "
                           f"{', '.join(EVENT_TYPES)}", field="events")
    return [t for t in EVENT_TYPES if t in names]


# -- URLs and addresses -------------------------------------------------------------------------

@dataclass(frozen=True)
class Target:
    scheme: str
    host: str
    port: int
    path: str      # with its query


def target(url: str) -> Target:
    """The parts of an endpoint URL we send to, or UnsafeURL: http(s) only, no user or password in it, no
    fragment; https unless the host is this machine (checked on its addresses: `vet`)."""
    if not isinstance(url, str) or not url or len(url) > MAX_URL or any(c.isspace() for c in url):
        raise UnsafeURL(f"an endpoint URL is an https:// URL of at most {MAX_URL} characters without spaces")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise UnsafeURL(f"{url[:100]!r} is not a URL; write it as https://HOST[:PORT]/PATH") from None
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise UnsafeURL(f"{url[:100]!r} is not an http(s) URL; write it as https://HOST[:PORT]/PATH")
    if parts.username is not None or parts.password is not None:
        raise UnsafeURL("an endpoint URL carries no user or password; the signature proves who sends")
    if parts.fragment:
        raise UnsafeURL("an endpoint URL has no #fragment")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80), path)


def networks(raw: str) -> tuple[str, ...]:
    """WEBHOOK_ALLOW_NETWORKS: comma-separated networks (CIDR), checked; ValueError naming a bad one."""
    found = []
    for item in (p.strip() for p in raw.split(",")):
        if item:
            found.append(str(ipaddress.ip_network(item, strict=False)))
    return tuple(found)


def address_refusal(address: str, allowed: Sequence[str]) -> str | None:
    """Why we will not send to this address, or None: anything but a public address (loopback, private,
    link-local, shared, reserved, multicast...) unless a network of WEBHOOK_ALLOW_NETWORKS holds it; a metadata
    service never."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip in METADATA:
        return f"{ip} is a cloud metadata service"
    if ip.is_global and not ip.is_multicast:
        return None
    if any(ip in ipaddress.ip_network(n) for n in allowed):
        return None
    kind = ("loopback" if ip.is_loopback else "link-local" if ip.is_link_local else "private" if ip.is_private
            else "multicast" if ip.is_multicast else "not public")
    return (f"{ip} is a {kind} address; webhooks go to public addresses only, unless WEBHOOK_ALLOW_NETWORKS "
            "holds it (a test or an internal deployment)")


def vet(where: Target, addresses: Sequence[str], allowed: Sequence[str]) -> str:
    """The address to connect to: the first the host resolved to, once every one of them passed (a host that
    answers one public and one private address is refused: the next lookup may give the other). UnsafeURL
    otherwise, and for plain http to anything but this machine."""
    if not addresses:
        raise UnsafeURL(f"{where.host} resolves to no address")
    for address in addresses:
        why = address_refusal(address, allowed)
        if why:
            raise UnsafeURL(f"{where.host} resolves to {why}")
    if where.scheme == "http" and not all(ipaddress.ip_address(a.split("%", 1)[0]).is_loopback for a in addresses):
        raise UnsafeURL(f"http://{where.host} would send events in clear text; use https:// (plain http:// is "
                        "allowed only for this machine)")
    return addresses[0]


# -- retries ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RetryPolicy:
    base_seconds: float = 5.0
    cap_seconds: float = 21_600.0
    window_seconds: float = 3 * 86_400.0


@dataclass(frozen=True)
class Decision:
    outcome: str                   # delivered, retry, dead, gone
    available_at: datetime | None  # the next try (retry)
    reason: str | None             # why it is dead


def backoff(attempt: int, policy: RetryPolicy, rand: float) -> float:
    """Seconds before the try after `attempt` (1-based): base x 2^(attempt-1), capped, its second half random
    (`rand` in [0, 1)), so receivers that came back are not met by every sender at once."""
    ceiling = min(policy.cap_seconds, policy.base_seconds * 2 ** min(max(attempt - 1, 0), 40))
    return ceiling / 2 + ceiling / 2 * rand


def decide(http_status: int | None, attempt: int, window_start: datetime, now: datetime, policy: RetryPolicy,
           rand: float) -> Decision:
    """What an attempt's answer makes of its message: a 2xx is delivered; a 410 says the endpoint is gone (the
    message is dead and the endpoint disabled); anything else, no answer included, is tried again after the
    backoff, unless that would be later than the retry window allows: then it is dead."""
    if http_status is not None and 200 <= http_status < 300:
        return Decision("delivered", None, None)
    if http_status == 410:
        return Decision("gone", None, "the endpoint answered 410 Gone: it is disabled")
    at = now + timedelta(seconds=backoff(attempt, policy, rand))
    if at > window_start + timedelta(seconds=policy.window_seconds):
        days = policy.window_seconds / 86_400
        return Decision("dead", None, f"not delivered after {attempt} attempts in {days:g} days")
    return Decision("retry", at, None)


# -- the body ---------------------------------------------------------------------------------------

def payload(event: Mapping, public_url: str) -> bytes:
    """The body of an event's messages: thin (ids, statuses and the API URLs to read more), never a secret or a
    signed media link; the same bytes on every attempt."""
    data = {"event_id": event["id"], "team": event["team"]}
    content, version, task = event.get("content_id"), event.get("version"), event.get("task_id")
    base = public_url.rstrip("/")
    urls = {}
    if content is not None:
        data["content_id"] = content
        urls["content"] = f"{base}/api/contents/{content}"
    if version is not None:
        data["version"] = version
        urls["version"] = f"{base}/api/contents/{content}/versions/{version}"
    if event["type"] in ("version.deliverable", "version.withdrawn"):
        urls["delivery"] = f"{base}/api/contents/{content}/delivery"
    if task is not None:
        data["task_id"] = task
        urls["task"] = f"{base}/api/tasks/{task}"
    data.update({k: v for k, v in (event.get("data") or {}).items() if v is not None})
    data["urls"] = urls
    body = {"type": event["type"], "timestamp": event["created_at"].isoformat(), "data": data}
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode()
