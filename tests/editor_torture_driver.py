"""Real processes for the editor torture test (tests/test_editor_torture.py).

    python editor_torture_driver.py person  VAULT NOTE -          # saves like an editor would (PHASES)
    python editor_torture_driver.py remember VAULT TAG STOPFILE   # Remember in a loop
    python editor_torture_driver.py admit   VAULT TAG STOPFILE    # admits turns (and remembers)

Each prints one JSON object per line for what it did, so the test can count what must survive:
the person's save numbers, and memvault's receipts (id and status). The amount of work is fixed,
not a wall time: the person makes the saves PHASES lists; the memvault loops write at least
MIN_ROUNDS rounds and go on until STOPFILE exists (the test makes it once the person is done), so
they write through every one of the person's phases however fast or slow the machine is.
"""

import json
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

AT = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)

#: (how the person saves, saves per second, how many saves): both save styles at 20 Hz and 1 Hz
PHASES = (("rename", 20.0, 50), ("inplace", 20.0, 50), ("rename", 1.0, 3), ("inplace", 1.0, 3))
#: the fewest rounds each memvault loop writes (it goes on until the person is done)
MIN_ROUNDS = 20


def emit(**fields) -> None:
    print(json.dumps(fields), flush=True)


def person(note: Path) -> None:
    number = 0
    for style, rate, saves in PHASES:
        for _ in range(saves):
            number += 1
            try:
                text = note.read_text("utf-8")
            except FileNotFoundError:
                text = "# 2026-11-30\n\n"
            new = text + f"- person edit {number} in {style} style\n"
            if style == "rename":  # vim's default, Obsidian, most editors: write a temp file, rename it over
                fd, temp = tempfile.mkstemp(dir=note.parent, prefix=f".{note.name}.", suffix=".swp")
                with os.fdopen(fd, "w", encoding="utf-8") as handle:
                    handle.write(new)
                os.replace(temp, note)
            else:  # nano, `vim -c 'set backupcopy=yes'`, many IDEs: truncate the file and write it again
                with open(note, "w", encoding="utf-8") as handle:
                    handle.write(new)
            emit(person=number, style=style)
            time.sleep(1.0 / rate)


def remember_loop(vault: Path, tag: str, stop: Path, admit: bool) -> None:
    """Remember (and admit a turn every third round) as a client of the running owner (watch):
    at least MIN_ROUNDS rounds, and on until `stop` exists."""
    from memvault import MemoryStore

    number = 0
    with MemoryStore.open(vault) as store:
        while number < MIN_ROUNDS or not stop.exists():
            number += 1
            if admit and number % 3 == 0:  # a turn every third round keeps the projection work bounded
                result = store.persist_completed_turn(f"{tag}-run-{number}", f"{tag} finished turn {number}.",
                                                      completed_at=AT)  # fmt: skip
                emit(admit=result.status, intake_id=result.id)
            receipt = store.remember(f"{tag} remembered fact number {number}.", at=AT)
            emit(remember=receipt.status, id=receipt.id)
            time.sleep(0.05)


def main() -> None:
    role, vault, arg, stop = sys.argv[1], Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
    if role == "person":
        person(vault / arg)
    else:
        remember_loop(vault, arg, stop, admit=role == "admit")


if __name__ == "__main__":
    main()
