"""The MCP server of `memvault mcp` (`cli/mcp_command.py`): the vault's memory tools, the Wake
snapshot and the protocol text, over stdio here and over streamable HTTP in `cli/mcp_http.py`.

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

Resources: `memvault://wake` (the Wake snapshot) and `memvault://protocol` (the static Runtime
Memory protocol and routing guidance, also the prompt `memvault-protocol`). When a call finds the
Wake digest changed (a write here, in another process, or a person's edit), subscribers get
`notifications/resources/updated` for the Wake: over the 2026 protocol through
`subscriptions/listen`, over the 2025 one through `resources/subscribe`.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path

from memvault.cli.mcp_tools import INSTRUCTIONS, READ_ONLY, SCHEMAS, WRITES, ToolOutcome, VaultSession
from memvault.indexer.runtime.turns import TURN_META_KEY
from memvault.vault.errors import VaultError

WAKE_URI, PROTOCOL_URI = "memvault://wake", "memvault://protocol"
PROTOCOL_PROMPT = "memvault-protocol"


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
    from mcp.server.stdio import stdio_server

    server = build_server(session)

    async def main() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(main)


def build_server(session: VaultSession):
    """The SDK's low-level `Server` over `session`: the same tools, resources and prompt for every
    transport (stdio here, streamable HTTP in `cli/mcp_http.py`)."""
    import anyio
    from mcp import types
    from mcp.server.lowlevel import Server
    from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ResourceUpdated

    bus = InMemorySubscriptionBus()
    wake = _WakeWatch()

    async def list_tools(_ctx, _params) -> types.ListToolsResult:
        await anyio.to_thread.run_sync(session.wait_ready)
        if wake.digest is None and session.runtime is not None:  # the state the client starts from
            try:
                wake.seen((await anyio.to_thread.run_sync(session.wake, False)).digest)
            except VaultError:
                pass  # unreadable now: the first readable state becomes the baseline
        return types.ListToolsResult(tools=[_tool(types, session, name) for name in session.offered_tools()])

    async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        turn_id = (params.meta or {}).get(TURN_META_KEY)
        outcome = await anyio.to_thread.run_sync(session.call, params.name, params.arguments, turn_id)
        # every call re-checks the digest: a write here, another process or a person's edit all count
        await _announce_wake(ctx, session, wake, bus, ResourceUpdated(WAKE_URI), reconcile=params.name in WRITES)
        return _result(types, outcome)

    async def list_resources(_ctx, _params) -> types.ListResourcesResult:
        await anyio.to_thread.run_sync(session.wait_ready)
        return types.ListResourcesResult(resources=[_resource(types, uri) for uri in _resource_uris(session)])

    async def read_resource(_ctx, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        from mcp.shared.exceptions import MCPError

        uri = str(params.uri)
        await anyio.to_thread.run_sync(session.wait_ready)
        if uri not in _resource_uris(session):
            raise MCPError(-32602, f"no resource {uri[:80]!r}: the resources are {', '.join(_resource_uris(session))}")
        if uri == WAKE_URI:
            text, meta = await _read_wake(session, wake)
        else:
            text, meta = session.protocol_text(), None
        contents = types.TextResourceContents(uri=uri, mime_type="text/markdown", text=text, meta=meta)
        return types.ReadResourceResult(contents=[contents])

    async def subscribe(_ctx, params) -> types.EmptyResult:
        from mcp.shared.exceptions import MCPError

        uri = str(params.uri)
        if uri not in (WAKE_URI, PROTOCOL_URI):  # only known URIs: a client cannot grow this set
            raise MCPError(-32602, f"no resource {uri[:80]!r} to subscribe to: use {WAKE_URI}")
        wake.subscribed.add(uri)
        return types.EmptyResult()

    async def unsubscribe(_ctx, params) -> types.EmptyResult:
        wake.subscribed.discard(str(params.uri))
        return types.EmptyResult()

    async def list_prompts(_ctx, _params) -> types.ListPromptsResult:
        prompt = types.Prompt(name=PROTOCOL_PROMPT, description=_PROMPT_DESCRIPTION)
        return types.ListPromptsResult(prompts=[prompt])

    async def get_prompt(_ctx, params: types.GetPromptRequestParams) -> types.GetPromptResult:
        from mcp.shared.exceptions import MCPError

        if params.name != PROTOCOL_PROMPT:
            raise MCPError(-32602, f"no prompt {params.name[:64]!r}: the prompt is {PROTOCOL_PROMPT}")
        text = await anyio.to_thread.run_sync(session.protocol_text)
        message = types.PromptMessage(role="user", content=types.TextContent(type="text", text=text))
        return types.GetPromptResult(description=_PROMPT_DESCRIPTION, messages=[message])

    server = Server("memvault", version=_version(), instructions=INSTRUCTIONS,
                    on_list_tools=list_tools, on_call_tool=call_tool,
                    on_list_resources=list_resources, on_read_resource=read_resource,
                    on_subscribe_resource=subscribe, on_unsubscribe_resource=unsubscribe,
                    on_subscriptions_listen=ListenHandler(bus),
                    on_list_prompts=list_prompts, on_get_prompt=get_prompt)  # fmt: skip
    return server


_PROMPT_DESCRIPTION = "The Runtime Memory protocol and routing guidance, for the system prompt (static)."


async def _read_wake(session: VaultSession, wake: _WakeWatch) -> tuple[str, dict]:
    """The Wake resource's text and meta. The client has now seen its digest, and its turn begins."""
    import anyio
    from mcp.shared.exceptions import MCPError

    try:
        snapshot = await anyio.to_thread.run_sync(session.wake)
    except VaultError as exc:
        raise MCPError(-32603, f"the Wake snapshot cannot be built: {exc}") from None
    wake.seen(snapshot.digest)
    session.turns.end_implicit_turn()  # reading the Wake is how a host starts a turn
    return snapshot.text, {"memvault/revision": snapshot.revision, "memvault/digest": snapshot.digest}


class _WakeWatch:
    """The Wake digest a client last saw or was told of, and the 2025-protocol subscriptions."""

    def __init__(self) -> None:
        self.digest: str | None = None
        self.subscribed: set[str] = set()

    def seen(self, digest: str) -> None:
        self.digest = digest

    def changed(self, digest: str) -> bool:
        """Whether to announce `digest`: only a change from one the client saw or was told of."""
        if digest == self.digest:
            return False
        known, self.digest = self.digest, digest
        return known is not None  # a client that never read the Wake has no snapshot to replace


async def _announce_wake(ctx, session: VaultSession, wake: _WakeWatch, bus, event, *, reconcile: bool) -> None:
    """Tell subscribers the Wake changed, only when its digest did (a client appends a snapshot then).
    Reads check without adopting hand edits (a read tool must not write); the client's next read does."""
    import anyio

    try:
        snapshot = await anyio.to_thread.run_sync(session.wake, reconcile)
    except VaultError:
        return  # an unreadable runtime state: the call's own answer and a Wake read say why
    if snapshot is None or not wake.changed(snapshot.digest):
        return
    await bus.publish(event)  # 2026 protocol: every subscriptions/listen stream that asked for it
    if WAKE_URI in wake.subscribed:  # 2025 protocol: resources/subscribe
        await ctx.session.send_resource_updated(WAKE_URI)


def _resource_uris(session: VaultSession) -> list[str]:
    return [WAKE_URI, PROTOCOL_URI] if session.runtime is not None else [PROTOCOL_URI]


def _resource(types, uri: str):
    if uri == WAKE_URI:
        return types.Resource(
            name="wake",
            uri=uri,
            mime_type="text/markdown",
            description=(
                "The Wake snapshot: the complete, revisioned USER/MEMORY state plus bounded covers of documents and"
                " memory spaces. Append it as a new message only when it changed (notifications/resources/updated)."
            ),
        )
    return types.Resource(
        name="protocol",
        uri=uri,
        mime_type="text/markdown",
        description=(
            "The static Runtime Memory protocol and routing guidance for the system prompt; byte-identical across"
            " memory writes."
        ),
    )


def _tool(types, session: VaultSession, name: str):
    read_only = READ_ONLY[name]
    annotations = types.ToolAnnotations(
        read_only_hint=read_only, destructive_hint=False, idempotent_hint=True, open_world_hint=False
    )
    description = session.description(name)
    return types.Tool(name=name, description=description, input_schema=SCHEMAS[name], annotations=annotations)


def _result(types, outcome: ToolOutcome):

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
