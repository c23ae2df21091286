"""The subprocess the capture crash matrix kills: it SIGKILLs itself at a named commit boundary.

    python tests/capture_crash_driver.py VAULT [--crash BOUNDARY [--nth K]]

It opens the (BuJo, capture-mode) vault, whose config points memory.llm at the test's loopback
chat server, admits the three runs of the story below (a host retrying every turn it handed
over: already admitted runs are duplicates), starts the intake worker (recovering whatever an
earlier crash left) and stops it with the 10 s drain. This file is the only place a crash hook
becomes a real SIGKILL (through `tests/crash_driver.py`'s hook); library code never reads the
environment or kills anything.
"""

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.crash_driver import crash_hook  # noqa: E402  (the one place a hook becomes a SIGKILL)

COMPLETED_AT = datetime(2026, 11, 30, 13, 3, tzinfo=UTC)
TURNS = (
    ("cap-run-0", "We set the Atlas deadline to February 1."),
    ("cap-run-1", "Morgan leads Atlas from now on."),
    ("cap-run-2", "The Atlas deadline moved to March 15."),
)


def wait_until_settled(vault: Path, timeout: float = 60.0) -> bool:
    """Poll (up to `timeout` s) until no record is pending: the work is done, not raced by the 10 s drain."""
    import time

    from memvault.vault.intake.files import PENDING, IntakeDirs

    dirs, deadline = IntakeDirs(vault), time.monotonic() + timeout
    while dirs.list_folder(PENDING).ids and time.monotonic() < deadline:
        time.sleep(0.05)
    return not dirs.list_folder(PENDING).ids


def main() -> int:
    from memvault.indexer.engine.store import MemoryStore

    parser = argparse.ArgumentParser()
    parser.add_argument("vault", type=Path)
    parser.add_argument("--crash", default=None)
    parser.add_argument("--nth", type=int, default=1)
    args = parser.parse_args()
    with MemoryStore.open(args.vault, env={}, sync=True) as store:
        results = [
            store.persist_completed_turn(run, text, capture_text=text, completed_at=COMPLETED_AT) for run, text in TURNS
        ]
        store.start_intake(crash_hook=crash_hook(args.crash, args.nth), poll_seconds=0.05)
        wait_until_settled(args.vault)
        report = store.stop(timeout=10.0)
    print(json.dumps({"results": [r.to_json() for r in results], "drained": report.drained}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
