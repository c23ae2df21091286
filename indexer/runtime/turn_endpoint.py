"""A turn's own loopback MCP endpoint: MemoryRecall (and MemoryJournal) for one agent turn.

    endpoint = open_turn_endpoint(memory, host_tools=None)   # raises EndpointUnavailable
    endpoint.url, endpoint.headers                           # give these to the model's MCP client
    endpoint.close()                                         # at the turn's end

The specification ("How it is provisioned") gives an agent host a request-scoped loopback MCP
endpoint backed by the same open store and retrieval service as automatic recall. Here that is
the MCP SDK's streamable-HTTP transport, stateless with JSON answers (a turn's client needs no
session and leaves no stream open), on 127.0.0.1 at a port the OS picks (or the host's),
behind `BearerGuard`: its own Host names and Origins only, and a fresh bearer token per turn.
Tool calls go to the turn's `TurnMemory`, so they spend the turn's budget and share its lookups.

`HostSession.begin_turn` opens one only when the caller says the turn holds its concurrency
slot; a start that fails is `EndpointUnavailable`, which the host turns into a warning and no
tool for that turn.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import anyio

from memvault.indexer.runtime.loopback import BearerGuard, LoopbackThread, PortUnavailable, bind_loopback, new_token
from memvault.indexer.runtime.memory_tools import READ_ONLY, SCHEMAS, TURN_INSTRUCTIONS, describe
from memvault.indexer.runtime.turn_memory import TurnMemory
from memvault.vault.errors import VaultError

MCP_PATH = "/mcp"
#: a turn's client sends small JSON-RPC requests: anything larger is refused (413) unread
MAX_REQUEST_BYTES = 256 * 1024


class EndpointUnavailable(VaultError):
    code = "endpoint_unavailable"


@dataclass(frozen=True)
class EndpointInfo:
    url: str
    token: str
    tools: tuple[str, ...]

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def mcp_server_config(self, name: str = "memvault") -> dict:
        """The usual `mcpServers` entry for a client that connects by URL."""
        return {name: {"type": "http", "url": self.url, "headers": self.headers}}


class TurnEndpoint:
    """A running endpoint; `close()` stops it and frees its port (idempotent)."""

    def __init__(self, thread: LoopbackThread, info: EndpointInfo) -> None:
        self._thread = thread
        self.info = info

    @property
    def url(self) -> str:
        return self.info.url

    @property
    def headers(self) -> dict[str, str]:
        return self.info.headers

    @property
    def running(self) -> bool:
        return self._thread.running

    def close(self) -> None:
        self._thread.stop()


def open_turn_endpoint(memory: TurnMemory, *, host_tools=None, port: int = 0, name: str = "turn") -> TurnEndpoint:
    """Start the turn's endpoint and return once it listens; EndpointUnavailable says why not."""
    try:
        bound = bind_loopback(port, ("127.0.0.1",))
    except PortUnavailable as exc:
        raise EndpointUnavailable(f"the turn's MCP endpoint could not listen: {exc}") from None
    token = new_token()
    try:
        app = BearerGuard(_mcp_app(memory, host_tools), token=token, port=bound.port, paths=(MCP_PATH,),
                          name="this turn's memvault endpoint")  # fmt: skip
        thread = LoopbackThread(app, bound, name=f"memvault-turn-endpoint-{name}"[:64])
        thread.start()
    except Exception as exc:  # noqa: BLE001 - any start failure means no tool this turn, never a failed turn
        bound.close()
        raise EndpointUnavailable(f"the turn's MCP endpoint could not start ({type(exc).__name__}: {exc})") from None
    info = EndpointInfo(f"http://127.0.0.1:{bound.port}{MCP_PATH}", token, memory.tools)
    return TurnEndpoint(thread, info)


def _mcp_app(memory: TurnMemory, host_tools):
    """The SDK's streamable-HTTP app over `memory.call` (the SDK loads only when a turn asks)."""
    from mcp import types
    from mcp.server.lowlevel import Server

    async def list_tools(_ctx, _params) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[_tool(types, name, host_tools) for name in memory.tools])

    async def call_tool(_ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        outcome = await anyio.to_thread.run_sync(memory.call, params.name, params.arguments)
        return _result(types, outcome)

    server = Server("memvault-turn", instructions=TURN_INSTRUCTIONS, on_list_tools=list_tools,
                    on_call_tool=call_tool)  # fmt: skip
    return server.streamable_http_app(streamable_http_path=MCP_PATH, stateless_http=True, json_response=True,
                                      max_request_body_size=MAX_REQUEST_BYTES)  # fmt: skip


def _tool(types, name: str, host_tools):
    annotations = types.ToolAnnotations(read_only_hint=READ_ONLY[name], destructive_hint=False, idempotent_hint=True,
                                        open_world_hint=False)  # fmt: skip
    return types.Tool(name=name, description=describe(name, host_tools), input_schema=SCHEMAS[name],
                      annotations=annotations)  # fmt: skip


def _result(types, outcome):
    text = json.dumps(outcome.payload, ensure_ascii=False, default=str)
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                structured_content=outcome.payload, is_error=outcome.is_error)  # fmt: skip
