"""Generate docs/cli.md from the commands' own `--help` text: `python -m memvault.cli.docgen > docs/cli.md`.

A test regenerates it and fails when the committed file is stale, so the reference never drifts.
"""

import click

from memvault.cli.main import cli
from memvault.cli.remote_commands import REMOTE_FORM_COMMANDS

HEADER = """# CLI reference

Generated from `memvault --help` by `python -m memvault.cli.docgen > docs/cli.md`; a test fails when this
file is stale. Every read command takes `--json`; errors under `--json` are
`{"error": {"code": ..., "message": ...}}` with exit code 1 (usage errors exit 2, as a
`usage_error` JSON object when the command line has `--json`). A usage error never repeats an
argument that looks like a secret, and an argument that is not UTF-8 is refused by position.
"""


def _walk(command: click.Command, path: list[str]):
    yield path, command
    if isinstance(command, click.Group):
        for name in sorted(command.list_commands(click.Context(command))):
            yield from _walk(command.get_command(click.Context(command), name), [*path, name])


REMOTE_HEADER = """
## `memvault --remote NAME …`

A vault on the index server, from a machine without its files (docs/team.md). `search`, `journal`,
`remember` and `health` are the commands above; these have remote forms of their own:
"""


def _pages():
    yield from _walk(cli, ["memvault"])
    yield None, REMOTE_HEADER
    for name in sorted(REMOTE_FORM_COMMANDS):
        yield from _walk(REMOTE_FORM_COMMANDS[name], ["memvault", "--remote", "NAME", name])


def render() -> str:
    parts = [HEADER]
    for path, command in _pages():
        if path is None:
            parts.append(command)
            continue
        # the group's help names (-h, --help) on every page, however click cached the option before
        with click.Context(
            command,
            info_name=" ".join(path),
            terminal_width=88,
            max_content_width=88,
            help_option_names=cli.context_settings.get("help_option_names", ["--help"]),
        ) as ctx:
            help_text = command.get_help(ctx)
        depth = len(path) - (2 if path[1:2] == ["--remote"] else 0)  # `--remote NAME` is no level
        level = "#" * min(2 + depth - 1, 4)
        parts.append(f"\n{level} `{' '.join(path)}`\n\n```text\n{help_text}\n```\n")
    return "".join(parts)


if __name__ == "__main__":
    print(render(), end="")
