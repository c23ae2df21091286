"""The subprocess the intake crash matrix kills: it SIGKILLs itself at a named commit boundary.

    python tests/crash_driver.py VAULT --runs 4 [--offset 0] [--crash BOUNDARY [--nth K]]
                                 [--op admit|retry|resolve] [--poison] [--fast-clock] [--together]

`--op admit` (default) opens the store, starts the intake worker (recovering any earlier crash),
admits runs `crash-run-<offset>` ... `crash-run-<offset+N-1>` (a host retrying every turn it
handed over) and
stops with the 10 s drain; `--together` admits them all before the worker starts, so it projects
and resolves them as one batch (vault/intake/resolve_together.py). `--op retry` / `--op resolve`
run the operator commands on every
active run. `--poison` makes projection fail (an invalid-UTF-8 daily note on the turns' date);
`--fast-clock` moves the store's clock 7 hours per reading, so backoff never waits and a
poisoned run reaches its 16th attempt at once. This file is the only place a crash hook becomes
a real `SIGKILL`; library code never reads the environment or kills anything.
"""

import argparse
import json
import os
import signal
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

COMPLETED_AT = datetime(2026, 11, 30, 13, 3, tzinfo=UTC)
POISONED_NOTE = "daily/2026-11-30.md"


def run_id(index: int) -> str:
    return f"crash-run-{index}"


def answer(index: int) -> str:
    return f"Crash matrix turn {index} settled topic{index} for the release."


def crash_hook(target: str | None, nth: int):
    seen = {"count": 0}

    def hook(boundary: str) -> None:
        if boundary != target:
            return
        seen["count"] += 1
        if seen["count"] == nth:
            os.kill(os.getpid(), signal.SIGKILL)

    return hook


def fast_clock():
    state = {"now": datetime.now(UTC)}

    def clock() -> datetime:
        state["now"] += timedelta(hours=7)
        return state["now"]

    return clock


def open_store(vault: Path, fast: bool):
    from memvault.indexer.engine.store import MemoryStore
    from memvault.vault.config import load_config
    from memvault.vault.layout import VaultLayout

    if not fast:
        return MemoryStore.open(vault, sync=True)
    store = MemoryStore(VaultLayout(vault.resolve()), load_config(vault.resolve(), {}), clock=fast_clock())
    store.sync()
    return store


def admit(vault: Path, runs: range, hook, fast: bool, together: bool = False) -> dict:
    with open_store(vault, fast) as store:
        if not together:
            store.start_intake(crash_hook=hook, poll_seconds=0.05)
        results = [store.persist_completed_turn(run_id(i), answer(i), completed_at=COMPLETED_AT) for i in runs]
        if together:  # every turn due at once: the worker projects and resolves them as one batch
            store.start_intake(crash_hook=hook, poll_seconds=0.05)
        report = store.stop(timeout=10.0)
    return {"results": [r.to_json() for r in results], "drained": report.drained}


def operate(vault: Path, op: str, hook) -> dict:
    from memvault.vault.clock import utc_now
    from memvault.vault.intake.files import DEAD, PENDING, IntakeDirs
    from memvault.vault.intake.operator import resolve_run_as_operator, retry_runs

    if op == "retry":
        return {"retried": retry_runs(vault, None, utc_now(), hook)}
    dirs = IntakeDirs(vault.resolve())
    ids = [*dirs.list_folder(PENDING).ids, *dirs.list_folder(DEAD).ids]
    return {"resolved": [resolve_run_as_operator(vault, i, "crash-matrix", utc_now(), hook) for i in ids]}


def main() -> int:
    print(json.dumps(run(sys.argv[1:])))
    return 0


def run(argv: list[str]) -> dict:
    """What the driver does for `argv`, in the calling process (a test's clean restart calls it
    directly: only a run that is killed needs a process of its own)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("vault", type=Path)
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--offset", type=int, default=0)
    parser.add_argument("--crash", default=None)
    parser.add_argument("--nth", type=int, default=1)
    parser.add_argument("--op", choices=("admit", "retry", "resolve"), default="admit")
    parser.add_argument("--poison", action="store_true")
    parser.add_argument("--fast-clock", action="store_true")
    parser.add_argument("--together", action="store_true", help="admit every run before the worker starts")
    args = parser.parse_args(argv)
    if args.poison:
        (args.vault / POISONED_NOTE).write_bytes(b"# 2026-11-30\n\n- \xff\xfe not UTF-8\n")
    hook = crash_hook(args.crash, args.nth)
    if args.op == "admit":
        summary = admit(args.vault, range(args.offset, args.offset + args.runs), hook, args.fast_clock, args.together)
    else:
        summary = operate(args.vault, args.op, hook)
    return summary


if __name__ == "__main__":
    sys.exit(main())
