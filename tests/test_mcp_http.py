"""`memvault mcp --http`: the stdio server's tools over the MCP SDK's streamable-HTTP transport,
on loopback, behind a per-start bearer token and Host/Origin checks.

Real parts only: the server is a `memvault` subprocess, the client the SDK's own HTTP client (and
`http.client` for what a stranger or a browser would send), the vaults real files and indexes.
"""

import http.client
import json
import queue
import re
import signal
import socket
import subprocess
import threading
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

from memvault.indexer.engine.client import find_owner
from tests.engine_helpers import ENV, MEMVAULT, REPO, TIMEOUT, OwnerProcess, memvault, wait_for
from tests.test_mcp import body_of, params

SERVING = re.compile(r"serving MCP over streamable HTTP at http://127\.0\.0\.1:(\d+)/mcp")
TOKEN = re.compile(r"bearer token \(send as 'Authorization: Bearer <token>'\): (\S+)")


class HttpServer:
    """`memvault mcp --http --port 0` as a child process; `url` and `token` from its stderr."""

    def __init__(self, vault: Path, *args: str, token: str | None = None) -> None:
        self.proc = subprocess.Popen([*MEMVAULT, "--vault", str(vault), "mcp", "--http", "--port", "0", *args],
                                     env=ENV, cwd=REPO, text=True, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
        self.lines: list[str] = []
        self._lines: queue.Queue = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.port = int(self.wait_line(SERVING).group(1))
        self.token = token or self.wait_line(TOKEN).group(1)
        self.url = f"http://127.0.0.1:{self.port}/mcp"

    def _read(self) -> None:
        for line in self.proc.stderr:
            self._lines.put(line)
        self._lines.put(None)

    def wait_line(self, pattern: re.Pattern) -> re.Match:
        for text in self.lines:
            if match := pattern.search(text):
                return match
        while True:
            try:
                line = self._lines.get(timeout=TIMEOUT)
            except queue.Empty:
                raise AssertionError(f"no line matching {pattern.pattern!r} in {self.lines}") from None
            assert line is not None, f"the server exited {self.proc.wait()}: {''.join(self.lines)}"
            self.lines.append(line)
            if match := pattern.search(line):
                return match

    def client(self, token: str | None = None) -> Client:
        headers = {"Authorization": f"Bearer {token or self.token}"}
        transport = streamable_http_client(self.url, http_client=create_mcp_http_client(headers=headers))
        return Client(transport, read_timeout_seconds=120)

    def request(self, method: str = "POST", path: str = "/mcp", headers: dict | None = None, body: bytes = b"{}"):
        """A raw request, as a stranger or a browser would send it: (status, parsed JSON body)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=TIMEOUT)
        try:
            conn.request(method, path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
            response = conn.getresponse()
            raw = response.read()
            return response.status, json.loads(raw) if raw.startswith(b"{") else raw
        finally:
            conn.close()

    def stop(self, sig=signal.SIGTERM) -> tuple[int, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        code = self.proc.wait(TIMEOUT)
        self._reader.join(TIMEOUT)  # stderr read to its end
        while (line := self._lines.get_nowait()) is not None:
            self.lines.append(line)
        return code, "".join(self.lines)


def port_is_closed(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def describe(tools) -> list[dict]:
    return [{"name": t.name, "description": t.description, "schema": t.input_schema,
             "annotations": t.annotations.model_dump() if t.annotations else None} for t in tools]  # fmt: skip


CALLS = [
    ("MemoryRecall", {"query": "Why did we switch the search backend to Tantivy?"}),
    ("MemoryRecall", {"query": 5}),  # a wrong type: the same error on both transports
    ("MemoryRecall", {"query": "x", "limit": 10_000}),
    ("MemoryJournal", {"start": "not a date"}),
    ("NoSuchTool", {}),
]


async def session_view(client) -> dict:
    tools = (await client.list_tools()).tools
    answers = []
    for name, arguments in CALLS:
        result = await client.call_tool(name, arguments)
        answers.append((result.is_error, body_of(result)))
    resources = sorted(str(r.uri) for r in (await client.list_resources()).resources)
    return {"tools": describe(tools), "answers": answers, "resources": resources}


@pytest.mark.both_backends
def test_http_offers_the_same_tools_schemas_answers_and_errors_as_stdio(fixture_vault):
    server = HttpServer(fixture_vault)
    try:
        views = {}

        async def main():
            async with Client(params(fixture_vault), read_timeout_seconds=120) as stdio:
                views["stdio"] = await session_view(stdio)
            async with server.client() as over_http:
                views["http"] = await session_view(over_http)

        anyio.run(main)
    finally:
        code, err = server.stop()
    for key in ("tools", "resources"):
        assert views["http"][key] == views["stdio"][key]
    for (http_error, http_body), (stdio_error, stdio_body) in zip(
        views["http"]["answers"], views["stdio"]["answers"], strict=True
    ):
        assert http_error == stdio_error
        assert http_body == stdio_body, (http_body, stdio_body)
    names = [tool["name"] for tool in views["http"]["tools"]]
    assert "MemoryRecall" in names and "Remember" in names
    recall = views["http"]["answers"][0][1]
    assert recall["hits"] and not recall["degraded"]
    assert [is_error for is_error, _ in views["http"]["answers"]] == [False, True, True, True, True]
    assert code == 0 and "memvault mcp: stopped" in err and "Traceback" not in err
    assert port_is_closed(server.port)


@pytest.mark.both_backends
def test_strangers_are_refused_and_the_server_keeps_serving(new_vault):
    server = HttpServer(new_vault)
    port, token = server.port, server.token
    own = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}
    try:
        assert server.request()[0] == 401  # no token
        status, body = server.request(headers={"Authorization": "Bearer " + "x" * 43})
        assert status == 401 and "Authorization: Bearer" in body["error"]["message"]
        assert server.request(headers={"Authorization": token})[0] == 401  # not the Bearer scheme
        status, body = server.request(headers={**own, "Host": f"evil.example:{port}"})  # DNS rebinding
        assert status == 400 and body["error"]["code"] == "wrong_host"
        assert server.request(headers={**own, "Host": "127.0.0.1:1"})[0] == 400  # another port's name
        status, body = server.request(headers={**own, "Origin": "http://evil.example"})  # a web page
        assert status == 403 and body["error"]["code"] == "foreign_origin"
        status, body = server.request(path="/other", headers=own)
        assert status == 404 and "/mcp" in body["error"]["message"]
        assert server.request(body=b"{" * (5 * 1024 * 1024), headers=own)[0] == 413  # oversized
        assert server.request(body=b"\xff\xfe not json", headers=own)[0] == 400  # malformed

        async def refused():
            with pytest.raises(Exception):  # noqa: B017 - the SDK's own error for a 401, whatever its class
                async with server.client(token="y" * 43) as client:
                    await client.list_tools()

        anyio.run(refused)
        names = {}

        async def concurrent():  # eight clients at once, then the server still answers each
            async def one(i):
                async with server.client() as client:
                    result = await client.call_tool("Remember", {"text": f"Parallel fact number {i} about kites."})
                    names[i] = (result.is_error, body_of(result))

            async with anyio.create_task_group() as group:
                for i in range(8):
                    group.start_soon(one, i)

        anyio.run(concurrent)
    finally:
        code, err = server.stop(signal.SIGINT)
    assert all(not is_error for is_error, _ in names.values()), (names, err)
    assert code == 0 and "Traceback" not in err
    found = memvault(new_vault, "search", "kites", "--json", "--limit", "20")
    assert found.returncode == 0
    assert len({hit["text"] for hit in json.loads(found.stdout)["hits"]}) == 8


@pytest.mark.both_backends
def test_a_token_file_is_used_and_never_printed(new_vault, tmp_path):
    secret = tmp_path / "token"
    secret.write_text("correct-horse-battery-staple-42\n")
    server = HttpServer(new_vault, "--token-file", str(secret), token="correct-horse-battery-staple-42")
    try:
        server.wait_line(re.compile("bearer token: the one in --token-file"))

        async def main():
            async with server.client() as client:
                return [tool.name for tool in (await client.list_tools()).tools]

        assert "MemoryRecall" in anyio.run(main)
    finally:
        _, err = server.stop()
    assert "correct-horse" not in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--http", "--host", "0.0.0.0"], "not a loopback address"),
        (["--http", "--host", "127.0.0.2"], "127.0.0.1, ::1 or localhost only"),
        (["--http", "--host", "example.com"], "not a loopback address"),
        (["--http", "--host", "192.168.1.10"], "not a loopback address"),
        (["--port", "8766"], "--port needs --http"),
        (["--token-file", "t"], "--token-file needs --http"),
        (["--http", "--port", "70000"], "70000"),
        (["--http", "--token-file", "missing-file"], "cannot read the token file"),
        (["--http", "--token-file", "short"], "at least 16 characters"),
        (["--http", "--token-file", "spaced"], "without spaces"),
    ],
)
def test_bad_options_get_a_clear_error_and_nothing_listens(new_vault, tmp_path, args, message):
    (tmp_path / "short").write_text("abc")
    (tmp_path / "spaced").write_text("a token with spaces in it")
    result = subprocess.run([*MEMVAULT, "--vault", str(new_vault), "mcp", *args], env=ENV, cwd=tmp_path,
                            capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL,
                            check=False)  # fmt: skip
    assert result.returncode == 2, result
    assert message in result.stderr and "Traceback" not in result.stderr


def test_a_port_in_use_is_named_with_the_fix(new_vault):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = subprocess.run([*MEMVAULT, "--vault", str(new_vault), "mcp", "--http", "--port", str(port)],
                                env=ENV, capture_output=True, text=True, timeout=TIMEOUT, check=False)  # fmt: skip
    assert result.returncode != 0
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr and "--port" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.both_backends
def test_through_a_running_owner_and_stopped_by_engine_stop(fixture_vault):
    owner = OwnerProcess(fixture_vault, "watch").wait_serving()
    try:
        server = HttpServer(fixture_vault)

        async def main():
            async with server.client() as client:
                result = await client.call_tool("Remember", {"text": "The HTTP face remembers through the owner."})
                assert not result.is_error, body_of(result)

        anyio.run(main)
        found = memvault(fixture_vault, "search", "HTTP face remembers", "--json")
        assert json.loads(found.stdout)["hits"][0]["text"] == "The HTTP face remembers through the owner."
        code, err = server.stop()
        assert code == 0 and "Traceback" not in err
    finally:
        owner.stop()
    alone = HttpServer(fixture_vault)  # no owner now: this server becomes the owner, and engine stop ends it
    wait_for(lambda: (found := find_owner(fixture_vault)) is not None and found.pid == alone.proc.pid,
             what="the HTTP server owning the vault")  # fmt: skip
    stopped = memvault(fixture_vault, "engine", "stop")
    assert stopped.returncode == 0, stopped.stderr
    assert alone.proc.wait(TIMEOUT) == 0
    assert port_is_closed(alone.port)
