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


RAW_ARGS_KEY = "memvault.raw_args"


def emit_json(payload: object) -> None:
    click.echo(printable(json.dumps(payload, indent=2, ensure_ascii=False, default=str)))


def printable(text: str) -> str:
    """`text` safe to write as UTF-8: bytes that were not UTF-8 (argv, env, file names decode
    them to lone surrogates) are shown as escapes instead of raising UnicodeEncodeError."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


class SafeUsageError(click.UsageError):
    """A usage error that never repeats a secret (a PEM block passed where an option was expected)
    and answers in JSON when the command line asked for --json."""

    def __init__(self, original: click.UsageError, wants_json: bool):
        super().__init__(safe_message(original.format_message()), original.ctx)
        self.wants_json = wants_json

    def show(self, file=None) -> None:
        if self.wants_json:
            click.echo(json.dumps({"error": {"code": "usage_error", "message": self.message}}, indent=2))
            return
        super().show(file)


def safe_message(message: str) -> str:
    from memvault.vault.credentials import find_credential

    kind = find_credential(message)
    if kind is not None:
        return (
            f"an argument looks like it contains {kind}, so it is not repeated here, and it was not "
            "stored. Remove the secret; to pass text that starts with '-', put it after `--`."
        )
    return printable(message)


def undecodable_argument(args: list[str]) -> str | None:
    """Why an argument is not valid UTF-8 (Python hands such bytes over as lone surrogates), or None."""
    for number, arg in enumerate(args, 1):
        bad = next((i for i, ch in enumerate(arg) if "\udc80" <= ch <= "\udcff"), None)
        if bad is not None:
            byte = ord(arg[bad]) - 0xDC00
            return (
                f"argument {number} is not valid UTF-8 (byte 0x{byte:02x} at character {bad + 1}); "
                "memvault stores text as UTF-8: re-encode it (e.g. `iconv -t UTF-8`) and try again"
            )
    return None


class ErrorTranslatingGroup(click.Group):
    """Turns VaultError into exit code 1 with the error's own message (JSON under --json), and
    usage errors into messages that never echo a secret or undecodable bytes."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if ctx.parent is None:
            ctx.meta[RAW_ARGS_KEY] = list(args)
        problem = undecodable_argument(args)
        if problem is not None:
            raise SafeUsageError(click.UsageError(problem, ctx), _wants_json(ctx))
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            raise SafeUsageError(exc, _wants_json(ctx)) from None

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except SafeUsageError:
            raise
        except click.UsageError as exc:  # a subcommand's parse error
            raise SafeUsageError(exc, _wants_json(ctx)) from None
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
    raise click.ClickException(printable(str(exc))) from exc


def _wants_json(ctx: click.Context) -> bool:
    return bool(ctx.meta.get(JSON_META_KEY)) or "--json" in ctx.meta.get(RAW_ARGS_KEY, ())
