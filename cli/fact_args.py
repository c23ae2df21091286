"""How `memvault remember` reads its arguments: a fact may start with '-', and `--at` may be a date.

A fact is often Markdown: a task (`- [ ] Ask Alice`), a rule (`---`), an arrow (`-> next`).
Click would read each as an unknown option. Only an argument shaped like an option (`-x`,
`--word`) is one; any other argument starting with '-' is the fact's text, as if it followed
`--`. A real typo (`--jsn`) still fails, and its message says how to store such text.
"""

from __future__ import annotations

import re
from datetime import datetime
from zoneinfo import ZoneInfo

import click

#: what an option looks like: `-h`, `--at`, `--json`; anything else starting with '-' is text
_OPTION_SHAPE = re.compile(r"--?[A-Za-z]")


class FactCommand(click.Command):
    """A command whose one positional argument is free text that may start with '-'."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, text_after_dashes(args, self._value_options(ctx)))
        except click.NoSuchOption as exc:
            hint = (
                f"{exc.format_message()} To store text that starts with '-', put `--` before it:"
                f" `{ctx.command_path} -- '{exc.option_name}…'`."
            )
            raise click.UsageError(hint, ctx) from None

    def _value_options(self, ctx: click.Context) -> set[str]:
        """Option spellings that take a value (the next argument is that value, not text)."""
        names: set[str] = set()
        for param in self.get_params(ctx):
            if isinstance(param, click.Option) and not param.is_flag and not param.count:
                names.update(param.opts)
        return names


def text_after_dashes(args: list[str], value_options: set[str]) -> list[str]:
    """`args` with every argument that starts with '-' but is not shaped like an option moved
    after a `--`, so click reads it as the text. Unchanged when `--` is already there."""
    if "--" in args:
        return list(args)
    kept, texts = [], []
    for number, arg in enumerate(args):
        after_value_option = number > 0 and args[number - 1] in value_options
        if arg.startswith("-") and arg != "-" and not after_value_option and not _OPTION_SHAPE.match(arg):
            texts.append(arg)
        else:
            kept.append(arg)
    return kept + ["--", *texts] if texts else kept


def parse_at(text: str, time_zone: str) -> datetime:
    """`--at`: ISO-8601 with an offset (`2026-11-30T14:03:00+01:00`, `…Z`), or a bare date
    (`2026-11-30`), which means the first instant of that day in the vault's zone (midnight,
    or the end of a DST gap that swallows midnight), as MemoryJournal reads a day."""
    from memvault.indexer.journal.date_range import JournalRequestError, resolve_range

    if re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", text):
        try:
            return resolve_range(text, text, time_zone).start.astimezone(_zone(time_zone))
        except JournalRequestError as exc:
            raise click.BadParameter(str(exc).replace("fromDate ", ""), param_hint="--at") from None
    try:
        when = datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is neither a date (2026-11-30) nor ISO-8601 with an offset (2026-11-30T14:03:00+01:00)",
            param_hint="--at",
        ) from None
    if when.tzinfo is None:
        raise click.BadParameter(
            f"{text!r} has no UTC offset: add one or Z (2026-11-30T14:03:00+01:00), or give a bare date"
            " (2026-11-30) for the start of that day in the vault's zone",
            param_hint="--at",
        )
    return when


def _zone(name: str):

    return ZoneInfo(name)
