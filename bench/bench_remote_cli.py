"""What one `memvault --remote NAME search` costs as a CLI process, beside a local `memvault search`
answered by the vault's running owner, in the same run (issue 42 item 8: within 2x).

    python -m bench.bench_remote_cli [--memories 1000] [--runs 15] [--dsn DSN]
                                     (default: a pgserver under /tmp)

A journal vault of --memories generated memories is indexed on the server and its owner started
(`memvault --vault ROOT serve`); then the same questions alternate between the two commands, a
fresh process each, with a bare `python -c pass` as the baseline of a process's start. Each pair's
outputs are compared (how many print the same hits, scores and order). Prints median and p95 per
command with the median CPU the process itself used (the owner's work for the local search is not
in it: the owner is another process), the ratio of the medians, and the machine's load averages
at the start and the end: compare runs by them on a shared machine.
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


def start_owner(root: Path, env: dict) -> subprocess.Popen:
    owner = subprocess.Popen([MEMVAULT, "--vault", str(root), "serve"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status = subprocess.run([MEMVAULT, "--vault", str(root), "engine", "status"], env=env, capture_output=True)
        if status.returncode == 0:
            return owner
        time.sleep(0.2)
    owner.terminate()
    raise SystemExit("the owner did not start within 60 s")


def compare(root: Path, env: dict, runs: int) -> dict[str, list[float]]:
    commands = {
        "python -c pass (baseline)": lambda q: [sys.executable, "-c", "pass"],
        "memvault search, owner up": lambda q: [MEMVAULT, "--vault", str(root), "search", q],
        f"memvault --remote {NAME} search": lambda q: [MEMVAULT, "--remote", NAME, "search", q],
    }
    samples: dict[str, list[float]] = {label: [] for label in commands} | {"same": []}
    for label in commands:
        samples[f"cpu {label}"] = []
    for query in queries(runs):
        outputs = []
        for label, command in commands.items():
            elapsed, cpu, out = timed(command(query), env)
            samples[label].append(elapsed)
            samples[f"cpu {label}"].append(cpu)
            outputs.append(out)
        samples["same"].append(float(outputs[1] == outputs[2]))
    return samples


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
    owner = None
    try:
        with MemoryStore.open(root, env=env) as store:
            store.rebuild()
        owner = start_owner(root, env)
        print(f"machine at the start (load)           {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}")
        timed([MEMVAULT, "--remote", NAME, "search", "warm the page cache"], env)  # the files' pages
        samples = compare(root, env, args.runs)
        same = samples.pop("same")
        cpu = {label[4:]: samples.pop(label) for label in list(samples) if label.startswith("cpu ")}
        for label, values in samples.items():
            print(f"{label:<38} {ms(values)}  (its own CPU: median {statistics.median(cpu[label]):6.1f} ms)")
        local, remote = (statistics.median(v) for v in list(samples.values())[1:])
        print(f"remote / local (medians)               {remote / local:.2f}x  "
              f"(the same output in {sum(same):.0f} of {len(same)} pairs)")  # fmt: skip
        print(f"machine at the end (load)             {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}")
    finally:
        if owner is not None:
            owner.terminate()
            owner.wait(timeout=30)
        if server is not None:
            server.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
