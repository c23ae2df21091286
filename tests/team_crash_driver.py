"""The owner the team crash matrix kills: it drains remote turns and SIGKILLs itself at a named
boundary (the drain's team.* boundaries, local admission's admit.*, projection's project.*).

    python tests/team_crash_driver.py VAULT DSN [--crash BOUNDARY [--nth K]] [--expect N]

Without --crash it runs until the server holds no waiting turn and the local intake has no
pending record (or 60 s), then stops with the normal drain. As in tests/crash_driver.py, this
file is the only place a crash hook becomes a real SIGKILL.
"""

import argparse
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def crash_hook(target, nth):
    seen = {"count": 0}

    def hook(boundary):
        if boundary == target:
            seen["count"] += 1
            if seen["count"] == nth:
                os.kill(os.getpid(), signal.SIGKILL)

    return hook


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("vault", type=Path)
    parser.add_argument("dsn")
    parser.add_argument("--crash", default=None)
    parser.add_argument("--nth", type=int, default=1)
    args = parser.parse_args()
    from memvault import MemoryStore

    store = MemoryStore.open(args.vault, env={"MEMVAULT_INDEX_DSN": args.dsn})
    store.start_intake(crash_hook=crash_hook(args.crash, args.nth), poll_seconds=0.05)
    pending = args.vault / ".capture-intake" / "pending"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        counts = store._owner.team.server.counts()
        local = [p for p in pending.iterdir() if not p.name.startswith(".")] if pending.is_dir() else []
        if counts["turnsWaiting"] == 0 and not local:
            break
        time.sleep(0.05)
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
