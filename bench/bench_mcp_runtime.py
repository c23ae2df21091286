"""The runtime tools over one running `memvault mcp`: per-call latency beside MemoryRecall.

    python -m bench.bench_mcp_runtime [--calls 20] [--spaces 2] [--memories 500]

One server, raw JSON-RPC over its pipes. Each SpaceRecall call names a fresh turn in `_meta`
(so each one is an initial search across every active space, the worst case); the baseline is
MemoryRecall on the vault itself, measured in the same run against the same server. Also times
RuntimeMemory add, DocumentSearch and a Wake read. Prints medians; asserts nothing.
"""

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.bench_mcp import MEMVAULT, _answer, _send
from bench.generate import make_vault


def _timed(process, request_id: int, method: str, params: dict) -> float:
    started = time.perf_counter()
    _send(process, {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
    _answer(process, request_id)
    return time.perf_counter() - started


def _setup(root: Path, spaces: int, memories: int) -> Path:
    from memvault.indexer.runtime.service import RuntimeService
    from memvault.vault.config import load_config

    vault = root / "vault"
    make_vault(vault, memories)
    service = RuntimeService(vault, load_config(vault, {}))
    for n in range(spaces):
        space = service.create_space(f"Space {n}")
        scratch = make_vault(root / f"scratch-{n}", memories, seed=n + 2)
        shutil.copytree(scratch / "daily", service.spaces.path_of(space.id) / "daily", dirs_exist_ok=True)
    service.create_document("Deploy runbook", "How we deploy: tag, build, roll out by region. " * 40)
    return vault


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--spaces", type=int, default=2)
    parser.add_argument("--memories", type=int, default=500)
    args = parser.parse_args()
    import subprocess

    with tempfile.TemporaryDirectory() as folder:
        vault = _setup(Path(folder), args.spaces, args.memories)
        process = subprocess.Popen([MEMVAULT, "--vault", str(vault), "mcp"], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)  # fmt: skip
        try:
            _send(
                process,
                {
                    "jsonrpc": "2.0",
                    "id": 0,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": "2025-11-25",
                        "capabilities": {},
                        "clientInfo": {"name": "bench", "version": "0"},
                    },
                },
            )
            _answer(process, 0)
            _send(process, {"jsonrpc": "2.0", "method": "notifications/initialized"})
            _timed(process, 1, "tools/list", {})  # waits for the vault to be opened
            ids = iter(range(10, 10**6))
            rows = {"MemoryRecall (baseline)": [], "SpaceRecall, fresh turn": [], "SpaceRecall, replay": [],
                    "DocumentSearch, fresh turn": [], "RuntimeMemory add": [], "resources/read wake": []}  # fmt: skip
            for n in range(args.calls):
                query = f"deployment color decision {n}"
                meta = {"memvault/turnId": f"bench-{n}"}
                rows["MemoryRecall (baseline)"].append(
                    _timed(process, next(ids), "tools/call", {"name": "MemoryRecall", "arguments": {"query": query}})
                )
                rows["SpaceRecall, fresh turn"].append(
                    _timed(
                        process,
                        next(ids),
                        "tools/call",
                        {"name": "SpaceRecall", "arguments": {"query": query}, "_meta": meta},
                    )
                )
                rows["SpaceRecall, replay"].append(
                    _timed(
                        process,
                        next(ids),
                        "tools/call",
                        {"name": "SpaceRecall", "arguments": {"query": query}, "_meta": meta},
                    )
                )
                rows["DocumentSearch, fresh turn"].append(
                    _timed(
                        process,
                        next(ids),
                        "tools/call",
                        {"name": "DocumentSearch", "arguments": {"query": "deploy region"}, "_meta": meta},
                    )
                )
                rows["RuntimeMemory add"].append(_timed(process, next(ids), "tools/call", {
                    "name": "RuntimeMemory", "arguments": {"action": "add", "target": "MEMORY",
                                                           "content": f"Bench rule number {n}."}}))  # fmt: skip
                rows["resources/read wake"].append(
                    _timed(process, next(ids), "resources/read", {"uri": "memvault://wake"})
                )
        finally:
            process.stdin.close()
            process.wait(timeout=60)
    print(f"memvault mcp runtime tools, median of {args.calls} calls, {args.spaces} active spaces of"
          f" {args.memories} memories each (vault: {args.memories}):")  # fmt: skip
    for name, times in rows.items():
        print(f"  {name:<28} {statistics.median(times) * 1000:8.1f} ms")


if __name__ == "__main__":
    sys.exit(main())
