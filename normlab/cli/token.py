"""`normlab token create --user NAME [--admin]`, `normlab token revoke ID|--user NAME`,
`normlab token list`: API tokens of a shared lab server (NORMLAB_AUTH=tokens), kept hashed in the
results store named by NORMLAB_DATABASE_URL (or the SQLite store under --data-dir)."""

from __future__ import annotations

import argparse
import json
import time
from typing import TYPE_CHECKING

from normlab.cli import CLIError

if TYPE_CHECKING:
    from backend.auth import TokenStore
    from normlab.cli import Subcommands
    from normlab.settings import Settings


def register(sub: Subcommands) -> None:
    p = sub.add_parser("token", help="create, revoke or list API tokens (NORMLAB_AUTH=tokens)")
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    c = verbs.add_parser("create", help="make a token for a user; it is printed once, stored hashed")
    c.add_argument("--user", required=True, help="who the token identifies (owner of their runs)")
    c.add_argument("--admin", action="store_true", help="may cancel and delete anyone's runs")
    r = verbs.add_parser("revoke", help="revoke one token by its id, or every token of a user")
    r.add_argument("token_id", nargs="?", help="the id shown by `normlab token list`")
    r.add_argument("--user", help="revoke all of this user's tokens")
    verbs.add_parser("list", help="list tokens (ids, users, admin, revoked) — never the tokens")
    for q in (c, r, verbs.choices["list"]):
        q.add_argument("--data-dir", default=None, help="the SQLite store's folder (default ~/.normlab)")
        q.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_token)


def _tokens(args: argparse.Namespace) -> tuple[TokenStore, Settings]:
    from backend.auth import TokenStore
    from normlab.cli import settings_from
    from normlab.store import get_store

    settings = settings_from(args)
    return TokenStore(get_store(settings)), settings


def cmd_token(args: argparse.Namespace) -> int:
    tokens, settings = _tokens(args)
    if args.verb == "create":
        try:
            token_id, token = tokens.create(args.user, admin=args.admin)
        except ValueError as exc:
            raise CLIError(str(exc)) from exc
        if args.json:
            print(
                json.dumps({"id": token_id, "user": args.user.strip(), "admin": args.admin, "token": token})
            )
        else:
            print(
                f"token {token_id} for {args.user.strip()}{' (admin)' if args.admin else ''}:\n{token}\n"
                "Keep it: it is shown only this once (the server stores a hash). Send it as "
                "'Authorization: Bearer <token>'."
            )
            if settings.auth != "tokens":
                print("Note: this server's NORMLAB_AUTH is 'off'; set NORMLAB_AUTH=tokens to require tokens.")
        return 0
    if args.verb == "revoke":
        if not args.token_id and not args.user:
            raise CLIError("give a token id (see `normlab token list`) or --user NAME")
        n = tokens.revoke(token_id=args.token_id, user=args.user)
        if n == 0:
            raise CLIError("no active token matched; `normlab token list` shows the ids")
        print(json.dumps({"revoked": n}) if args.json else f"revoked {n} token(s)")
        return 0
    rows = tokens.list()
    if args.json:
        print(json.dumps(rows))
        return 0
    if not rows:
        print("no tokens yet: normlab token create --user NAME")
    for row in rows:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(row["created_at"]))
        state = "revoked" if row["revoked_at"] else "active"
        print(f"{row['id']}  {row['user']:<20} {'admin' if row['admin'] else 'user ':<6} {when}  {state}")
    return 0
