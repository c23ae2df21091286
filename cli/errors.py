"""The one place library errors become exit codes and messages (plain or JSON)."""

import json
import sys

import click

from memvault.vault.errors import VaultError
from memvault.vault.storage_errors import storage_error

JSON_META_KEY = "memvault.json_output"
EXIT_ERROR = 1


def json_option(function):
    """`--json` for a command; also tells the error handler to answer errors in JSON."""

    def remember_choice(ctx: click.Context, _param, value: bool) -> bool:
        ctx.meta[JSON_META_KEY] = value
        return value

    return click.option(
        "--json",
        "json_",
        is_flag=True,
        expose_value=True,
        callback=remember_choice,
        help="Print machine-readable JSON.",
    )(function)


def emit_json(payload: object) -> None:
    click.echo(json.dumps(payload, indent=2, ensure_ascii=False, default=str))


class ErrorTranslatingGroup(click.Group):
    """Turns VaultError into exit code 1 with the error's own message (JSON under --json)."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except VaultError as exc:
            fail(ctx, exc)
        except OSError as exc:  # a full disk, a read-only mount, a permission: typed, named, no traceback
            typed = storage_error(exc, (ctx.obj or {}).get("vault_path") if isinstance(ctx.obj, dict) else None)
            if typed is None:
                raise
            fail(ctx, typed)


def fail(ctx: click.Context, exc: VaultError):
    """Exit 1 with the error's message: a JSON error object under --json, else click's `Error: ...`."""
    if ctx.meta.get(JSON_META_KEY):
        emit_json({"error": {"code": exc.code, "message": str(exc)}})
        sys.exit(EXIT_ERROR)
    raise click.ClickException(str(exc)) from exc
