"""Real processes for the editor torture test (tests/test_editor_torture.py).

    python editor_torture_driver.py person  VAULT NOTE SECONDS   # saves like an editor would
    python editor_torture_driver.py remember VAULT TAG SECONDS   # Remember in a loop
    python editor_torture_driver.py admit   VAULT TAG SECONDS    # admits turns (and remembers)

Each prints one JSON object per line for what it did, so the test can count what must survive:
the person's save numbers, and memvault's receipts (id and status).
"""

import json
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

AT = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)

#: (seconds into the run, how the person saves, saves per second): both save styles at 20 Hz and 1 Hz
PHASES = ((0.0, "rename", 20.0), (0.25, "inplace", 20.0), (0.5, "rename", 1.0), (0.75, "inplace", 1.0))


def emit(**fields) -> None:
    print(json.dumps(fields), flush=True)


def person(note: Path, seconds: float) -> None:
    started = time.monotonic()
    number = 0
    while (elapsed := time.monotonic() - started) < seconds:
        style, rate = next((s, r) for at, s, r in reversed(PHASES) if elapsed >= at * seconds)
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


def remember_loop(vault: Path, tag: str, seconds: float, admit: bool) -> None:
    """Remember (and admit a turn every third round) as a client of the running owner (watch)."""
    from memvault import MemoryStore

    started = time.monotonic()
    number = 0
    with MemoryStore.open(vault) as store:
        while time.monotonic() - started < seconds:
            number += 1
            if admit and number % 3 == 0:  # a turn every third round keeps the projection work bounded
                result = store.persist_completed_turn(f"{tag}-run-{number}", f"{tag} finished turn {number}.",
                                                      completed_at=AT)  # fmt: skip
                emit(admit=result.status, intake_id=result.id)
            receipt = store.remember(f"{tag} remembered fact number {number}.", at=AT)
            emit(remember=receipt.status, id=receipt.id)
            time.sleep(0.05)


def main() -> None:
    role, vault, arg, seconds = sys.argv[1], Path(sys.argv[2]), sys.argv[3], float(sys.argv[4])
    if role == "person":
        person(vault / arg, seconds)
    else:
        remember_loop(vault, arg, seconds, admit=role == "admit")


if __name__ == "__main__":
    main()
