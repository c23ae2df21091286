"""`memvault mcp` start-up: spawn → initialize answered → tools/list → first MemoryRecall.

    python -m bench.bench_mcp [--runs 5]

Speaks raw JSON-RPC over the pipes (so the client's own imports are not counted) against a small
generated vault. Prints medians beside two baselines: a bare interpreter, and an interpreter that
only imports the MCP SDK's server (the floor any SDK-based server pays). Asserts nothing.
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.generate import make_vault

MEMVAULT = str(Path(sys.executable).parent / "memvault")


def _send(process, message: dict) -> None:
    process.stdin.write(json.dumps(message) + "\n")
    process.stdin.flush()


def _answer(process, request_id: int) -> dict:
    while True:
        line = process.stdout.readline()
        if not line:
            raise RuntimeError("the server closed its stdout")
        message = json.loads(line)
        if message.get("id") == request_id:
            return message


def one_run(vault: Path) -> tuple[float, float, float]:
    started = time.perf_counter()
    process = subprocess.Popen([MEMVAULT, "--vault", str(vault), "mcp"], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)  # fmt: skip
    try:
        _send(
            process,
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "bench", "version": "0"},
                },
            },
        )
        _answer(process, 1)
        initialized = time.perf_counter() - started
        _send(process, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        _send(process, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        _answer(process, 2)
        listed = time.perf_counter() - started
        _send(
            process,
            {
                "jsonrpc": "2.0",
                "id": 3,
                "method": "tools/call",
                "params": {"name": "MemoryRecall", "arguments": {"query": "deployment color"}},
            },
        )
        _answer(process, 3)
        called = time.perf_counter() - started
    finally:
        process.stdin.close()
        process.wait(timeout=30)
    return initialized, listed, called


def baseline(code: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        vault = Path(folder) / "vault"
        make_vault(vault, 2000)
        runs = [one_run(vault) for _ in range(args.runs)]
        bare = statistics.median(baseline("pass") for _ in range(args.runs))
        sdk = statistics.median(baseline("import mcp.server.lowlevel, mcp.server.stdio") for _ in range(args.runs))
    init, listed, called = (statistics.median(column) for column in zip(*runs, strict=True))
    print(f"memvault mcp, median of {args.runs} runs on a 2,000-memory vault:")
    print(f"  spawn → initialize answered   {init * 1000:7.0f} ms   (target: under 1,500 ms)")
    print(f"  spawn → tools/list answered   {listed * 1000:7.0f} ms   (waits for the vault to be opened)")
    print(f"  spawn → first MemoryRecall    {called * 1000:7.0f} ms")
    print(f"  baseline: bare interpreter    {bare * 1000:7.0f} ms")
    print(f"  baseline: import the MCP SDK  {sdk * 1000:7.0f} ms   (the floor for any server built on it)")


if __name__ == "__main__":
    main()
