"""A Python host that owns a vault (`MemoryStore.start_intake`) and holds its first deferred index
commit until told to go on: `python -m tests.owner_host_driver VAULT FLAGS`.

FLAGS is a folder: `blocked` appears when the owner's commit of acknowledged writes has begun and
is held at the `deferred.committing` boundary; creating `release` lets it go on; `stop` ends the
host. The index, notes and processes are all real; only the moment of the commit is held.
"""

import sys
import time
from pathlib import Path

from memvault import MemoryStore


def main(root: Path, flags: Path) -> None:
    def hold_the_commit(boundary: str) -> None:
        if boundary == "deferred.committing":
            (flags / "blocked").touch()
            while not (flags / "release").exists():
                time.sleep(0.02)

    store = MemoryStore.open(root, engine=False)
    store.start_intake(crash_hook=hold_the_commit, poll_seconds=0.2)
    print("serving", flush=True)
    while not (flags / "stop").exists():
        time.sleep(0.05)
    store.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
