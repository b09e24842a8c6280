"""`normlab fork RUN --step K [--norm …] [--lr …] …`: fork a run of a running normlab server after step
K (or `now`), with changes; prints the child's id and its fork step."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from normlab.fork import CHANGEABLE

if TYPE_CHECKING:
    from normlab.cli import Subcommands

# The fork's changes that take one plain value on the command line (probes: through the API or a form).
OPTIONS = {name: None for name in CHANGEABLE if name != "probes"}


def register(sub: Subcommands) -> None:
    p = sub.add_parser(
        "fork",
        help="fork a run from a step with changes (norm, lr, batch size, …) on a running server",
        description=__doc__.split("\n\n")[0],
        epilog="Exit status: 0 queued, 2 refused (the message says why) or no server.",
    )
    p.add_argument("run", help="the parent run's id")
    p.add_argument("--step", required=True, help="fork after this step (one the run has reached), or 'now'")
    from normlab_client.spec import RunSpec

    for name in OPTIONS:
        field = RunSpec.model_fields[name]
        # argparse formats help with %: the spec's descriptions are prose ("2 % of its time")
        help_text = (field.description or "").replace("%", "%%")
        p.add_argument("--" + name.replace("_", "-"), dest=f"change_{name}", help=help_text)
    p.add_argument("--url", help="the server (default: NORMLAB_API_URL, else http://127.0.0.1:8050)")
    p.add_argument("--token", help="an API token, on a server with NORMLAB_AUTH=tokens")
    p.add_argument("--json", action="store_true", help="print the answer as one JSON object")
    p.set_defaults(func=run)


def changes_from(args: argparse.Namespace) -> dict[str, object]:
    """The options given, as the API's `changes`: numbers as numbers, names as text (the API checks them
    and says what is wrong)."""
    out: dict[str, object] = {}
    for name in OPTIONS:
        text = getattr(args, f"change_{name}")
        if text is not None:
            try:
                out[name] = json.loads(text)
            except ValueError:
                out[name] = text
    return out


def run(args: argparse.Namespace) -> int:
    import httpx

    from normlab.cli import CLIError, settings_from

    settings = settings_from(args)
    base = (args.url or settings.api_url or f"http://127.0.0.1:{settings.port or 8050}").rstrip("/")
    step: int | str = "now" if args.step == "now" else _int(args.step)
    headers = {"Authorization": f"Bearer {args.token}"} if args.token else {}
    try:
        r = httpx.post(
            f"{base}/api/runs/{args.run}/fork",
            json={"step": step, "changes": changes_from(args)},
            headers=headers,
            timeout=60,
        )
    except httpx.HTTPError as exc:
        raise CLIError(
            f"no normlab server answered at {base} ({exc}); start one (normlab up) or pass --url"
        ) from None
    if r.status_code != 201:
        try:
            detail = r.json().get("detail")
        except ValueError:
            detail = r.text[:300]
        raise CLIError(f"{r.status_code}: {detail}")
    body = r.json()
    if args.json:
        print(json.dumps(body))
    else:
        print(f"forked {args.run} after step {body['from_step']}: child run {body['id']}")
    return 0


def _int(text: str) -> int:
    from normlab.cli import CLIError

    try:
        return int(text)
    except ValueError:
        raise CLIError(f"--step takes a step number or 'now', not {text!r}") from None
