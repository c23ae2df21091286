"""The runtime layer's commands: `memvault runtime`, `memvault doc`, `memvault space`.

Thin: parse, one `RuntimeService` call, print. Library errors become exit 1 in the group.
`MEMVAULT_TEST_CRASH_AT=<boundary>` (crash tests only) is read here, at the entry layer, and
handed to the library as an explicit hook that SIGKILLs this process at that commit boundary.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import click

from memvault.cli.app import cli
from memvault.cli.errors import emit_json, json_option

CRASH_ENV = "MEMVAULT_TEST_CRASH_AT"
TARGET = click.Choice(["USER", "MEMORY"], case_sensitive=False)


def _crash_hook():
    wanted = os.environ.get(CRASH_ENV)
    if not wanted:
        return None

    def boundary(name: str) -> None:
        if name == wanted:
            os.kill(os.getpid(), signal.SIGKILL)

    return boundary


def _service(ctx: click.Context, spaces_root: Path | None = None, strategy: str = "layered"):
    from memvault.indexer.runtime.service import RuntimeService
    from memvault.vault.runtime.activity import Switches

    return RuntimeService.open(
        ctx.obj["vault_path"], env=dict(os.environ), spaces_root=spaces_root,
        switches=Switches(strategy=strategy), boundary=_crash_hook(),
    )  # fmt: skip


def spaces_option(function):
    return click.option(
        "--spaces-root",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help="Storage root of the memory spaces. Default: <vault>/spaces.",
    )(function)


def strategy_option(function):
    return click.option(
        "--strategy",
        type=click.Choice(["layered", "general"]),
        default="layered",
        show_default=True,
        help="layered: maintain a full target (compact USER, archive MEMORY); general: reject the write.",
    )(function)


def _receipt(receipt, json_: bool) -> None:
    if json_:
        emit_json(receipt.to_json())
        return
    line = (
        f"{receipt.status}: {receipt.target} revision {receipt.revision} "
        f"({receipt.used_bytes}/{receipt.limit_bytes} bytes)"
    )
    if receipt.maintenance:
        line += f"; {receipt.maintenance}" + (f", {receipt.archived} entries archived" if receipt.archived else "")
    if receipt.adopted:
        line += f"; adopted hand edits of {', '.join(receipt.adopted)}"
    click.echo(line)


# --- memvault runtime --------------------------------------------------------------------------


@cli.group("runtime")
def runtime_group() -> None:
    """Hot memory: runtime/USER.md and runtime/MEMORY.md, always loaded."""


@runtime_group.command("show")
@json_option
@click.pass_context
def runtime_show(ctx: click.Context, json_: bool) -> None:
    """Print the committed USER and MEMORY entries with their revision and usage."""
    view = _service(ctx).show()
    if json_:
        emit_json({
            "revision": view.revision,
            "files": view.files,
            "targets": {t: {"usedBytes": view.used(t), "limitBytes": view.limits[t],
                            "entries": [e.to_json() for e in view.state.of(t)]} for t in ("USER", "MEMORY")},
        })  # fmt: skip
        return
    click.echo(f"runtime memory, revision {view.revision}")
    for target in ("USER", "MEMORY"):
        click.echo(f"\n{target} ({view.used(target)}/{view.limits[target]} bytes)")
        for entry in view.state.of(target):
            click.echo(f"  - {entry.content}  [importance {entry.importance}]")
        if view.files[target] == "edited":
            click.echo(f"  (runtime/{target}.md was edited by hand: the next write adopts it)")


@runtime_group.command("add")
@click.argument("target", type=TARGET)
@click.argument("text")
@click.option("--importance", type=click.IntRange(1, 5), default=3, show_default=True, help="1 (low) to 5 (high).")
@strategy_option
@spaces_option
@json_option
@click.pass_context
def runtime_add(ctx, target: str, text: str, importance: int, strategy: str, spaces_root, json_: bool) -> None:
    """Add one entry to TARGET (USER or MEMORY)."""
    _receipt(_service(ctx, spaces_root, strategy).add(target.upper(), text, importance), json_)


@runtime_group.command("replace")
@click.argument("target", type=TARGET)
@click.argument("old_text")
@click.argument("new_text")
@click.option("--importance", type=click.IntRange(1, 5), default=None, help="A new importance (default: keep).")
@strategy_option
@spaces_option
@json_option
@click.pass_context
def runtime_replace(
    ctx, target: str, old_text: str, new_text: str, importance, strategy: str, spaces_root, json_: bool
) -> None:
    """Replace the entry OLD_TEXT names (exact text, else a unique part of it) with NEW_TEXT."""
    _receipt(_service(ctx, spaces_root, strategy).replace(target.upper(), old_text, new_text, importance), json_)


@runtime_group.command("remove")
@click.argument("target", type=TARGET)
@click.argument("old_text")
@json_option
@click.pass_context
def runtime_remove(ctx, target: str, old_text: str, json_: bool) -> None:
    """Remove the entry OLD_TEXT names (exact text, else a unique part of it)."""
    _receipt(_service(ctx).remove(target.upper(), old_text), json_)


# --- memvault doc ------------------------------------------------------------------------------


@cli.group("doc")
def doc_group() -> None:
    """Documents: project records in documents/*.md under a byte budget."""


def _body(body: str | None, file: Path | None) -> str | None:
    if body is not None and file is not None:
        raise click.UsageError("give --body or --file, not both")
    if file is None:
        return body
    if str(file) == "-":
        return sys.stdin.read()
    try:
        return file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise click.BadParameter(f"cannot read {file}: {exc}", param_hint="--file") from None


def _doc_receipt(receipt, json_: bool) -> None:
    if json_:
        emit_json(receipt.to_json())
        return
    click.echo(
        f"{receipt.status}: {receipt.path} revision {receipt.revision} "
        f"({receipt.used_bytes}/{receipt.limit_bytes} bytes)"
    )
    for moved in receipt.archived:
        click.echo(f"  archived {moved.id} -> {moved.path}{' (indexed in a memory space)' if moved.indexed else ''}")


_body_options = [
    click.option("--body", default=None, help="The document's Markdown body."),
    click.option("--file", type=click.Path(dir_okay=False, path_type=Path), default=None,
                 help="Read the body from a file ('-' for stdin)."),
]  # fmt: skip


def body_options(function):
    for option in reversed(_body_options):
        function = option(function)
    return function


@doc_group.command("create")
@click.argument("title")
@body_options
@click.option("--summary", default="", help="One line saying what the document is for.")
@spaces_option
@json_option
@click.pass_context
def doc_create(ctx, title: str, body, file, summary: str, spaces_root, json_: bool) -> None:
    """Create a document titled TITLE (archiving the least-recently-used one if the budget is full)."""
    text = _body(body, file)
    if text is None:
        raise click.UsageError("give the body with --body or --file")
    _doc_receipt(_service(ctx, spaces_root).create_document(title, text, summary), json_)


@doc_group.command("update")
@click.argument("doc_id")
@body_options
@click.option("--title", default=None, help="A new title.")
@click.option("--summary", default=None, help="A new summary.")
@click.option("--expected-revision", type=int, default=None, help="Refuse unless the document is at this revision.")
@spaces_option
@json_option
@click.pass_context
def doc_update(ctx, doc_id: str, body, file, title, summary, expected_revision, spaces_root, json_: bool) -> None:
    """Update document DOC_ID (compare-and-swap against --expected-revision when given)."""
    service = _service(ctx, spaces_root)
    receipt = service.update_document(
        doc_id, _body(body, file), title=title, summary=summary, expected_revision=expected_revision
    )
    _doc_receipt(receipt, json_)


@doc_group.command("archive")
@click.argument("doc_id")
@click.option("--expected-revision", type=int, default=None, help="Refuse unless the document is at this revision.")
@spaces_option
@json_option
@click.pass_context
def doc_archive(ctx, doc_id: str, expected_revision, spaces_root, json_: bool) -> None:
    """Move DOC_ID to documents/archived/, indexing it in a memory space first when one exists."""
    _doc_receipt(_service(ctx, spaces_root).archive_document(doc_id, expected_revision), json_)


@doc_group.command("list")
@click.option("--archived", is_flag=True, help="Also list archived documents.")
@json_option
@click.pass_context
def doc_list(ctx, archived: bool, json_: bool) -> None:
    """List active documents, least recently updated first."""
    service = _service(ctx)
    docs = service.documents.list()
    cold = service.documents.list_archived() if archived else []
    if json_:
        emit_json({"documents": [d.to_json() for d in docs], "usedBytes": sum(d.size for d in docs),
                   "limitBytes": service.documents.limit, "archived": cold})  # fmt: skip
        return
    if not docs:
        click.echo("No active documents.")
    for doc in docs:
        click.echo(f"{doc.id}  r{doc.revision}  {doc.size} bytes  {doc.updated}  {doc.title}")
    for path in cold:
        click.echo(f"archived: {path}")


# --- memvault space ----------------------------------------------------------------------------


@cli.group("space")
def space_group() -> None:
    """Memory spaces: long-term vaults under one storage root."""


@space_group.command("list")
@spaces_option
@json_option
@click.pass_context
def space_list(ctx, spaces_root, json_: bool) -> None:
    """List every memory space in the catalog."""
    spaces = _service(ctx, spaces_root).spaces.list()
    if json_:
        emit_json({"spaces": [s.to_json() for s in spaces]})
        return
    if not spaces:
        click.echo("No memory spaces yet: create one with `memvault space create TITLE`.")
    for space in spaces:
        state = "active" if space.active else "inactive"
        click.echo(f"{space.id}  {state}{'' if space.writable else ' read-only'}  {space.title}")


@space_group.command("create")
@click.argument("title")
@click.option("--description", default="", help="What belongs in this space.")
@click.option("--inactive", is_flag=True, help="Create it inactive (the first write activates it).")
@spaces_option
@json_option
@click.pass_context
def space_create(ctx, title: str, description: str, inactive: bool, spaces_root, json_: bool) -> None:
    """Create a memory space (the first one gets the id 'default')."""
    space = _service(ctx, spaces_root).create_space(title, description, active=not inactive)
    if json_:
        emit_json(space.to_json())
    else:
        click.echo(f"created space {space.id}: {space.title}")
