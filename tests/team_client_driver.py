"""An agent process on "another machine": admits turns (and remembers facts) to a vault on the
index server through MemoryStore.connect, and prints every answer as JSON.

    python tests/team_client_driver.py DSN WORKER load N REMEMBERS [GOFILE]   # the load schedule below
    python tests/team_client_driver.py DSN WORKER until STOPFILE     # new turns until STOPFILE exists

Load schedule, call j of N: j % 4 == 3 an exact retry of the last new run (a quarter), j % 10 == 4
the last new run id with other bytes (a tenth, a conflict), else a new run. With GOFILE the
driver connects, creates GOFILE.ready-WORKER and starts its loop once GOFILE exists (the bench
starts every client's loop together, after their start-up).
"""

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

NAME = "team-a"


def answer(worker: int, j: int) -> str:
    return f"Load turn w{worker}x{j} chose shard{worker}x{j} for the queue."


def load(store, worker: int, count: int, remembers: int) -> list:
    out, last = [], None
    for j in range(count):
        if j % 4 == 3 and last is not None:
            kind, run, text = "retry", f"w{worker}-{last}", answer(worker, last)
        elif j % 10 == 4 and last is not None:
            kind, run, text = "conflict", f"w{worker}-{last}", answer(worker, last) + " Or not."
        else:
            kind, run, text, last = "new", f"w{worker}-{j}", answer(worker, j), j
        result = store.persist_completed_turn(run, text)
        out.append([kind, run, result.status, result.reason])
    for k in range(remembers):
        receipt = store.remember(f"Load fact w{worker}x{k} keeps bucket{worker}x{k} warm.")
        out.append(["fact", receipt.id, receipt.status, None])
    return out


def until(store, worker: int, stopfile: Path) -> None:
    j = 0
    while not stopfile.exists():
        run = f"u{worker}-{j}"
        result = store.persist_completed_turn(run, f"Restart turn u{worker}x{j} picked lane{worker}x{j}.")
        print(json.dumps([run, result.status, result.reason, result.message]), flush=True)
        j += 1
        time.sleep(0.02)


def main() -> int:
    from memvault.indexer.engine.connected import ConnectedStore

    dsn, worker, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    store = ConnectedStore(NAME, dsn)
    if mode == "load":
        store.settings()  # connected before the clock starts (bench/bench_team.py reads stderr)
        if len(sys.argv) > 6:
            go = Path(sys.argv[6])
            Path(f"{go}.ready-{worker}").touch()
            while not go.exists():
                time.sleep(0.002)
        started = time.time()
        calls = load(store, worker, int(sys.argv[4]), int(sys.argv[5]))
        print(json.dumps({"started": started, "ended": time.time()}), file=sys.stderr)
        print(json.dumps(calls))
    else:
        until(store, worker, Path(sys.argv[4]))
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
