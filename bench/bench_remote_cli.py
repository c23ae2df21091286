"""What one `memvault --remote NAME search` costs as a CLI process, beside a local `memvault search`
answered by the vault's running owner, in the same run (issue 42 item 8: within 2x): through this
machine's resident connection (`memvault --remote NAME serve`) and in a process of its own.

    python -m bench.bench_remote_cli [--memories 1000] [--runs 15] [--dsn DSN]
                                     (default: a pgserver under /tmp)

A journal vault of --memories generated memories is indexed on the server, its owner started
(`memvault --vault ROOT serve`) and a resident connection to it (`memvault --remote NAME serve`);
then the same questions alternate between the commands, a fresh process each, with a bare
`python -c pass` as the baseline of a process's start. The remote search in a process of its own
runs with one more libpq variable (PGAPPNAME), so it does not reach the resident. Each remote
output is compared with the local one (how many print the same hits, scores and order). Prints
median and p95 of the wall time per command, and median and p95 of the CPU the process itself
used (the owner's or the resident's work is not in it: another process), the ratios of the
medians, and the machine's load averages at the start and the end: compare runs by them on a
shared machine.
"""

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.bench_postgres import on_server, start_server
from bench.bench_search import percentile, queries
from bench.generate import make_vault
from memvault.indexer.engine.store import MemoryStore

NAME = "remote-cli"
MEMVAULT = str(Path(sys.executable).parent / "memvault")


def ms(samples: list[float]) -> str:
    return f"median {statistics.median(samples):7.1f} ms  p95 {percentile(samples, 0.95):7.1f} ms"


def timed(command: list[str], env: dict) -> tuple[float, float, str]:
    """(wall ms, the process's own CPU ms, its output)."""
    before, start = _children_cpu(), time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    elapsed, cpu = (time.perf_counter() - start) * 1000, _children_cpu() - before
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()}")
    return elapsed, cpu, done.stdout


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (usage.ru_utime + usage.ru_stime) * 1000


def start(command: list[str], env: dict, ready: list[str], what: str) -> subprocess.Popen:
    """`command` in the background, once `ready` exits 0 (at most 60 s)."""
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if subprocess.run(ready, env=env, capture_output=True).returncode == 0 and process.poll() is None:
            return process
        time.sleep(0.2)
    process.terminate()
    raise SystemExit(f"{what} did not start within 60 s")


#: exits 0 once the resident connection answers (with the environment it runs in)
_RESIDENT_UP = (
    "import os, sys; from memvault.indexer.engine.resident_client import find_resident; "
    f"sys.exit(find_resident({NAME!r}, os.environ) is None)"
)


#: one more libpq variable: other connection settings, so never the resident's (address.resident_paths)
ALONE_ENV = {"PGAPPNAME": "memvault-bench-alone"}
LOCAL = "memvault search, owner up"
RESIDENT = f"memvault --remote {NAME} search, resident up"
ALONE = f"memvault --remote {NAME} search, own process"


def compare(root: Path, env: dict, runs: int) -> dict[str, dict[str, list[float]]]:
    alone = {**env, **ALONE_ENV}
    commands = {
        "python -c pass (baseline)": (lambda q: [sys.executable, "-c", "pass"], env),
        LOCAL: (lambda q: [MEMVAULT, "--vault", str(root), "search", q], env),
        RESIDENT: (lambda q: [MEMVAULT, "--remote", NAME, "search", q], env),
        ALONE: (lambda q: [MEMVAULT, "--remote", NAME, "search", q], alone),
    }
    wall = {label: [] for label in commands}
    cpu = {label: [] for label in commands}
    same = {RESIDENT: [], ALONE: []}
    for query in queries(runs):
        outputs = {}
        for label, (command, command_env) in commands.items():
            elapsed, used, outputs[label] = timed(command(query), command_env)
            wall[label].append(elapsed)
            cpu[label].append(used)
        for label in same:
            same[label].append(float(outputs[label] == outputs[LOCAL]))
    return {"wall": wall, "cpu": cpu, "same": same}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--memories", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--dsn", default=None)
    args = parser.parse_args()
    server, dsn = start_server() if args.dsn is None else (None, args.dsn)
    env = {**os.environ, "MEMVAULT_INDEX_DSN": dsn}
    root = on_server(make_vault(Path(tempfile.mkdtemp(prefix="memvault-bench-remote-")) / NAME, args.memories,
                                mode="journal"), NAME)  # fmt: skip
    owner = resident = None
    try:
        with MemoryStore.open(root, env=env) as store:
            store.rebuild()
        owner = start([MEMVAULT, "--vault", str(root), "serve"], env,
                      [MEMVAULT, "--vault", str(root), "engine", "status"], "the owner")  # fmt: skip
        resident = start(
            [MEMVAULT, "--remote", NAME, "serve"], env, [sys.executable, "-c", _RESIDENT_UP], "the resident"
        )
        print(f"machine at the start (load)           {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}")
        for warm in (env, {**env, **ALONE_ENV}):  # the files' pages, both ways
            timed([MEMVAULT, "--remote", NAME, "search", "warm the page cache"], warm)
        figures = compare(root, env, args.runs)
        for label, values in figures["wall"].items():
            print(f"{label:<48} wall {ms(values)}")
            print(f"{'':<48} CPU  {ms(figures['cpu'][label])}")
        for label in (RESIDENT, ALONE):
            same = figures["same"][label]
            ratios = [statistics.median(figures[kind][label]) / statistics.median(figures[kind][LOCAL])
                      for kind in ("wall", "cpu")]  # fmt: skip
            print(f"{label[9:]:<48} / local (medians): wall {ratios[0]:.2f}x, CPU {ratios[1]:.2f}x  "
                  f"(the same output in {sum(same):.0f} of {len(same)} pairs)")  # fmt: skip
        print(f"machine at the end (load)             {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}")
    finally:
        for process in (resident, owner):
            if process is not None:
                process.terminate()
                process.wait(timeout=30)
        if server is not None:
            server.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
