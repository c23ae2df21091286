"""`memvault mcp`: MemoryRecall, MemoryJournal and Remember for any MCP client, over stdio.

Built on the official `mcp` SDK's low-level `Server` (the SDK's MCPServer would derive each
schema from a Python signature and coerce "5" into 5; the tools here publish hand-written JSON
schemas with `additionalProperties: false` and check every argument themselves, so a malformed
call is always a tool error with a message the model can act on).

Start-up does as little as possible before answering the handshake: the vault is located, its
config read and the store opened in a background thread (`VaultSession.prepare`), and
`tools/list` waits for that. Tool calls run in worker threads, one at a time. When no other
process owns the vault the server becomes its owner (docs/engine.md: it holds the liveness fence,
drains the intake and answers other memvault processes); otherwise it is a client of the owner.
stdout carries only protocol messages: notes for the operator go to stderr.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path

import click

from memvault.cli.app import cli
from memvault.cli.mcp_tools import DESCRIPTIONS, INSTRUCTIONS, READ_ONLY, SCHEMAS, ToolOutcome, VaultSession


@cli.command("mcp")
@click.pass_context
def mcp_command(ctx: click.Context) -> None:
    """Serve the vault to an MCP client over stdio (tools: MemoryRecall, MemoryJournal, Remember).

    Launched by the client, not by hand: register `memvault mcp` (with --vault PATH or
    MEMVAULT_MEMORY_PATH) in the client's MCP server config. Which tools are offered follows the
    vault's memory.recallTool, memory.rememberTool and tools.allowedTools / deniedTools.
    """
    serve(ctx.obj["vault_path"], dict(os.environ), Path.cwd())


def serve(vault_path, env: dict, cwd: Path) -> None:
    session = VaultSession(vault_path, env, cwd)
    threading.Thread(target=_prepare, args=(session,), name="memvault-mcp-prepare", daemon=True).start()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: _terminate(session))
    try:
        _run(session)  # returns at EOF on stdin: the client closed the connection
    finally:
        session.close()


def _terminate(session: VaultSession) -> None:
    """SIGTERM / Ctrl-C: drain the store and release the fence, then leave at once (the SDK's
    stdin reader thread may be blocked in a read that never returns, so a normal exit would hang)."""
    try:
        session.close()
    finally:
        os._exit(0)


def _prepare(session: VaultSession) -> None:
    session.prepare()
    for note in session.notes:
        print(f"memvault mcp: {note}", file=sys.stderr, flush=True)
    owner = None if session.attached is None else session.attached.owner
    if owner is not None:  # `memvault engine stop` asks the owner to go: this server then exits
        owner.stop_requested.wait()
        _terminate(session)


def _run(session: VaultSession) -> None:
    import anyio
    import mcp.types as types
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server

    async def list_tools(_ctx, _params) -> types.ListToolsResult:
        await anyio.to_thread.run_sync(session.wait_ready)
        return types.ListToolsResult(tools=[_tool(types, name) for name in session.offered_tools()])

    async def call_tool(_ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        outcome = await anyio.to_thread.run_sync(session.call, params.name, params.arguments)
        return _result(types, outcome)

    server = Server("memvault", version=_version(), instructions=INSTRUCTIONS,
                    on_list_tools=list_tools, on_call_tool=call_tool)  # fmt: skip

    async def main() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(main)


def _tool(types, name: str):
    read_only = READ_ONLY[name]
    annotations = types.ToolAnnotations(
        read_only_hint=read_only, destructive_hint=False, idempotent_hint=True, open_world_hint=False
    )
    return types.Tool(name=name, description=DESCRIPTIONS[name], input_schema=SCHEMAS[name], annotations=annotations)


def _result(types, outcome: ToolOutcome):
    import json

    text = json.dumps(outcome.payload, ensure_ascii=False, default=str)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content=outcome.payload,
        is_error=outcome.is_error,
    )


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("memvault")
    except PackageNotFoundError:
        return "0"
