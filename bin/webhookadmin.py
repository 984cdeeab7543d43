"""`bin/webhooks`: register, list, rotate, disable, enable and remove webhook endpoints, and send messages again
(pipeline/webhooks.py; docs/webhooks.md). Argument parsing and exit codes only.

Exit codes: 0 done, 1 refused (unknown endpoint or team, a URL that may not receive, a bad event type), 2 cannot
reach PostgreSQL or bad configuration (SECRET_KEY is needed: endpoint secrets are derived from it).
"""

from __future__ import annotations

import argparse
import sys

from bin.commands import _on_database, _settings
from pipeline.core.webhooks import EVENT_TYPES


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bin/webhooks", description=(
        "Webhook endpoints, per team: events are signed as the Standard Webhooks specification says and sent at "
        "least once (docs/webhooks.md). Exit codes: 0 done, 1 refused (unknown endpoint or team, a URL that may "
        "not receive, an unknown event type), 2 cannot reach PostgreSQL or bad configuration."))
    sub = parser.add_subparsers(dest="command", required=True)
    add = sub.add_parser("add", help="register an endpoint and print its secret once")
    add.add_argument("url", help="https://... (http:// only for this machine); its addresses must be public unless "
                                 "WEBHOOK_ALLOW_NETWORKS holds them")
    add.add_argument("--team", required=True, help="the team whose events it receives")
    add.add_argument("--events", default="", help=f"comma-separated, among {', '.join(EVENT_TYPES)} (default: all)")
    add.add_argument("--description", default="", help="a note for people (at most 200 characters)")
    add.add_argument("--by", required=True, help="who registers it; recorded")
    lister = sub.add_parser("list", help="every endpoint, with its pending and dead messages")
    lister.add_argument("--team", default=None, help="only this team's")
    rotate = sub.add_parser("rotate", help="a new secret, printed once; the old one still signs during the overlap")
    rotate.add_argument("endpoint_id", type=int)
    rotate.add_argument("--overlap", type=float, default=86_400, metavar="SECONDS",
                        help="how long messages also carry the old secret's signature (default 86400; 0: none)")
    disable = sub.add_parser("disable", help="no new message; its pending messages become dead")
    disable.add_argument("endpoint_id", type=int)
    disable.add_argument("--by", required=True, help="who disables it; recorded")
    disable.add_argument("--reason", default="disabled by an admin")
    enable = sub.add_parser("enable", help="the endpoint receives new messages again")
    enable.add_argument("endpoint_id", type=int)
    remove = sub.add_parser("remove", help="the endpoint and its messages' history, for good")
    remove.add_argument("endpoint_id", type=int)
    again = sub.add_parser("send-again", help="send messages again: these ids, or (--dead) every dead one")
    again.add_argument("endpoint_id", type=int)
    which = again.add_mutually_exclusive_group(required=True)
    which.add_argument("--message", type=int, action="append", metavar="ID", help="a message id (repeatable)")
    which.add_argument("--dead", action="store_true", help="every dead message of the endpoint")
    return parser


def _operator(args):
    """Who runs the command, as `--by` names them: an operator with the database's keys, acting as an admin."""
    from pipeline.core.principal import Principal
    return Principal.without_key(args.by, role="admin")


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    cfg = _settings()
    from pipeline import webhooks
    from pipeline.core.errors import ConfigError, InvalidInput, NotFound
    if args.command in ("add", "rotate"):
        try:
            webhooks.secret_key(cfg)
        except ConfigError as exc:
            print(f"configuration error: {exc}", file=sys.stderr)
            return 2

    def work(conn) -> None:
        if args.command == "add":
            made = webhooks.add(conn, cfg, team=args.team, url=args.url, events=args.events, by=_operator(args),
                                description=args.description)
            e = made.endpoint
            print(f"registered endpoint {e['id']} of team {e['team']} for {', '.join(e['events'])}: {e['url']}")
            print("its secret, shown only now (give it to the receiver):")
            print(made.secret)
        elif args.command == "list":
            for e in webhooks.endpoints(conn, args.team):
                state = f"disabled: {e['disabled_reason']}" if e["disabled_at"] else "live"
                print(f"{e['id']:>5}  {e['team']:<16}  {e['url']}  [{', '.join(e['events'])}]  {e['pending']} "
                      f"pending, {e['dead']} dead  {state}")
        elif args.command == "rotate":
            made = webhooks.rotate(conn, cfg, args.endpoint_id, overlap_seconds=args.overlap)
            until = made.endpoint["previous_until"]
            print(f"endpoint {args.endpoint_id} has a new secret; messages carry the old one's signature too "
                  f"until {until:%Y-%m-%d %H:%M:%S %Z}. The new secret, shown only now:")
            print(made.secret)
        elif args.command == "disable":
            dead = webhooks.disable(conn, args.endpoint_id, by=_operator(args), reason=args.reason)
            print(f"disabled endpoint {args.endpoint_id}; {dead} pending messages are dead (send them again once "
                  "it is enabled: send-again --dead)")
        elif args.command == "enable":
            webhooks.enable(conn, args.endpoint_id)
            print(f"endpoint {args.endpoint_id} receives new messages again")
        elif args.command == "remove":
            gone = webhooks.remove(conn, args.endpoint_id)
            print(f"removed endpoint {gone['id']} of team {gone['team']} ({gone['url']}) and its messages")
        else:
            ids = webhooks.send_again(conn, args.endpoint_id, None if args.dead else args.message)
            print(f"sending {len(ids)} messages again: {', '.join(map(str, ids)) or 'none'}")
    return _on_database(cfg, work, refusals=(InvalidInput, NotFound))
