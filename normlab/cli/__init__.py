"""The `normlab` command. Each sub-command lives in its own module with a ``register(subparsers)``.

Modules are listed in one dict; heavy imports (torch, the service) happen inside the handlers so that
``normlab --help`` and ``normlab catalog`` stay fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import TYPE_CHECKING

from pydantic import ValidationError

if TYPE_CHECKING:
    from normlab.settings import Settings

    # what each sub-command module's register() receives: parser.add_subparsers()'s result
    Subcommands = argparse._SubParsersAction[argparse.ArgumentParser]

# sub-command module -> owner area. Each module defines register(subparsers).
COMMAND_MODULES = [
    "normlab.cli.catalog",  # catalog
    "normlab.cli.run",  # run
    "normlab.cli.invariance",  # invariance
    "normlab.cli.reproduce",  # reproduce
    "normlab.cli.bench",  # bench engine|stream|probes|kernel|faults|frontend
    "normlab.cli.serve",  # up, api, frontend, worker
    "normlab.cli.token",  # token create|revoke|list
    "normlab.cli.db",  # db upgrade|status
    "normlab.cli.maintain",  # gc, backup, restore
    "normlab.cli.fork",  # fork
    "normlab.cli.depth",  # depth-init
]


class CLIError(Exception):
    """A mistake the user can fix; printed as one message, exit status 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="normlab", description="normlab: a live lab for normalization in neural-network training."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)  # a module that fails to import fails the command
    return parser


def settings_from(args: argparse.Namespace) -> Settings:
    """The settings a command runs with: NORMLAB_* from the environment, read here once, with the
    command's --data-dir / --api-url on top. Passed down from here; never written back to os.environ."""
    from pathlib import Path

    from normlab.settings import Settings
    from normlab_client.norms import load_plugins

    overrides: dict[str, object] = {}
    if getattr(args, "data_dir", None):
        overrides["data_dir"] = Path(args.data_dir).expanduser().resolve()
    if getattr(args, "api_url", None):
        overrides["api_url"] = args.api_url
    settings = Settings(**overrides)  # type: ignore[arg-type]
    load_plugins(settings.plugins)  # every command sees the same catalog as the API and the workers
    return settings


def settings_message(exc: ValidationError) -> str:
    """One line per bad NORMLAB_* environment variable, saying what it must be."""
    parts = []
    for err in exc.errors():
        name = "NORMLAB_" + "_".join(str(p) for p in err["loc"]).upper()
        parts.append(f"{name}={err.get('input')!s}: {err['msg']}")
    return "bad setting: " + "; ".join(parts) + " (fix or unset the variable)"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except CLIError as exc:
        print(f"normlab {args.command}: {exc}", file=sys.stderr)
        return 2
    except ValidationError as exc:
        if exc.title != "Settings":  # not a NORMLAB_* variable: a bug, keep its traceback
            raise
        print(f"normlab {args.command}: {settings_message(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        # The store refuses an out-of-date schema with a message naming `normlab db upgrade`. Looked up
        # here only if the store was imported, so `normlab --help` does not import SQLAlchemy.
        migrate = sys.modules.get("normlab.store.migrate")
        if migrate is None or not isinstance(exc, migrate.SchemaOutOfDate):
            raise
        print(f"normlab {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
