"""The official MCP Inspector (CLI mode) lists and calls the runtime tools of `memvault mcp`.

Runs `npx -y @modelcontextprotocol/inspector --cli <memvault> --vault V mcp --method …`, the way
docs/mcp.md tells a person to check a server (the command npx runs is looked up once, then run
directly for each method). Skipped, with the reason, when `npx` is missing
or the package cannot be fetched; any other failure fails the test.

It runs on the local engine only: what the Inspector checks is the MCP wire protocol (the tool list,
a call's structured content, a resource read), which no engine changes. The same tools' answers on
both engines are checked through the MCP SDK's own client (tests/test_mcp_runtime.py,
tests/test_mcp.py), each Inspector call here costs a node process and a server process of its own.
"""

import functools
import json
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.test_mcp import ALL_TOOLS, MEMVAULT, backend_vault

INSPECTOR = "@modelcontextprotocol/inspector"
NOT_FETCHED = ("ENOTFOUND", "E404", "EAI_AGAIN", "ECONNREFUSED", "ETIMEDOUT", "network request")


@functools.cache
def inspector_command() -> str:
    """The `mcp-inspector` command that `npx -y @modelcontextprotocol/inspector` runs, fetched and
    found once: npx's own start-up and package check took seconds on every one of the calls below."""
    done = subprocess.run(
        ["npx", "-y", "-p", INSPECTOR, "-c", "command -v mcp-inspector"], capture_output=True, text=True, timeout=600
    )
    if done.returncode != 0 and any(marker in done.stderr for marker in NOT_FETCHED):
        pytest.skip(f"the MCP Inspector could not be fetched from npm: {done.stderr.strip()[:200]}")
    assert done.returncode == 0 and done.stdout.strip(), done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


def inspector(vault, *args: str) -> dict:
    command = [inspector_command(), "--cli", MEMVAULT, "--vault", str(vault), "mcp", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=vault.parent)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def call(vault, tool: str, **arguments) -> dict:
    pairs = [f"{key}={value}" for key, value in arguments.items()]
    reply = inspector(vault, "--method", "tools/call", "--tool-name", tool, *(["--tool-arg", *pairs] if pairs else []))
    assert not reply["isError"], reply
    return reply["structuredContent"]


@pytest.mark.one_engine(
    "it checks the MCP wire protocol with an outside client; the tools on both engines: test_mcp_runtime.py"
)
@pytest.mark.slow
@pytest.mark.skipif(shutil.which("npx") is None, reason="npx (node/npm) is not installed")
def test_the_inspector_lists_and_calls_the_runtime_tools(tmp_path):
    vault = backend_vault(tmp_path, "v")
    listed = inspector(vault, "--method", "tools/list")
    assert [tool["name"] for tool in listed["tools"]] == ALL_TOOLS
    added = call(vault, "RuntimeMemory", action="add", target="USER", content="Prefers metric units.", importance=4)
    assert added["status"] == "added" and added["revision"] == 1
    created = subprocess.run(
        [MEMVAULT, "--vault", str(vault), "doc", "create", "Deploy window", "--body", "Tuesdays 14:00 UTC."],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    # one read-only tool call and one resource read through the Inspector; every other tool's
    # answers are checked through the MCP SDK's own client (tests/test_mcp_runtime.py, test_mcp.py)
    with ThreadPoolExecutor(max_workers=2) as pool:  # read-only, each its own server process
        found, wake = pool.map(lambda job: job(), [
            lambda: call(vault, "DocumentSearch", query="deploy window"),
            lambda: inspector(vault, "--method", "resources/read", "--uri", "memvault://wake"),
        ])  # fmt: skip
    assert [record["id"] for record in found["records"]] == ["deploy-window"]
    assert "Prefers metric units." in wake["contents"][0]["text"]
