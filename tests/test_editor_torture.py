"""Issue 14, finding 1: a person saving a note while memvault writes to it loses nothing.

Real processes only: a person-save loop (temp-and-rename and in-place truncate-and-write, each
at 20 Hz and at 1 Hz) on the one note that two memvault processes write to (Remember in both,
turn admission in one) while `memvault watch` follows the edits. After 60 s: every person save
is in the note, every memvault receipt's id is in it exactly once, and the index equals a
rebuild. The counts are printed. No assertion depends on speed or on event order: only on the
final files, polled for with generous timeouts.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memvault import MemoryStore

REPO = Path(__file__).resolve().parent.parent
DRIVER = Path(__file__).with_name("editor_torture_driver.py")
NOTE = "daily/2026-11-30.md"
SECONDS = 60.0
WATCH_SECONDS = 45.0  # then the watcher stops and the admitting process projects its turns live


def _spawn(*args: str, stderr=subprocess.DEVNULL) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, *args], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=stderr, text=True)  # fmt: skip


def _events(proc: subprocess.Popen, timeout: float) -> list[dict]:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"{proc.args} exited {proc.returncode}"
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


@pytest.mark.slow
def test_person_saves_and_memvault_writes_all_survive_a_minute_of_contention(new_vault):
    note = new_vault / NOTE
    note.parent.mkdir(exist_ok=True)
    note.write_text("---\ntimeZone: UTC\n---\n# 2026-11-30\n\nNotes typed by a person.\n", encoding="utf-8")
    watch = _spawn("-m", "memvault", "--vault", str(new_vault), "watch", "--debounce", "0.05", stderr=subprocess.PIPE)
    assert watch.stderr.readline().startswith("watching")
    try:
        person = _spawn(str(DRIVER), "person", str(new_vault), NOTE, str(SECONDS))
        alpha = _spawn(str(DRIVER), "remember", str(new_vault), "alpha", str(SECONDS))
        beta = _spawn(str(DRIVER), "admit", str(new_vault), "beta", str(SECONDS))
        time.sleep(WATCH_SECONDS)  # scenario timing, not an assertion: the watcher runs for the first part
    finally:
        watch.send_signal(signal.SIGTERM)
        watch.communicate(timeout=60)
    saves = _events(person, timeout=120)
    receipts = _events(alpha, timeout=180) + _events(beta, timeout=180)

    with MemoryStore.open(new_vault) as store:  # the sync on open repairs a line a last save dropped
        store.start_intake()  # turns the admitting process had no time left to project
        assert store.stop(timeout=120).drained
        store.sync()
        text = note.read_text("utf-8")
        lost_saves = [s["person"] for s in saves if f"- person edit {s['person']} in {s['style']} style\n" not in text]
        remembered = [r for r in receipts if "remember" in r]
        admitted = [r for r in receipts if r.get("admit") == "admitted"]
        copies = {r["id"]: text.count(f"^{r['id']}") for r in remembered}
        copies |= {f"t-{r['intake_id'][:10]}": text.count(f"^t-{r['intake_id'][:10]}") for r in admitted}
        lost_writes = sorted(i for i, n in copies.items() if n == 0)
        doubled = sorted(i for i, n in copies.items() if n > 1)
        served = store._writable_index().all_rows()
        store.rebuild()
        rebuilt = store._writable_index().all_rows()
    print(f"\nperson saves: {len(saves)} ({sum(s['style'] == 'rename' for s in saves)} rename, "
          f"{sum(s['style'] == 'inplace' for s in saves)} in place), lost {len(lost_saves)}; "
          f"memvault writes: {len(remembered)} remember, {len(admitted)} admitted turns, "
          f"lost {len(lost_writes)}, duplicated {len(doubled)}; index rows {len(served)}, rebuild {len(rebuilt)}")
    assert len(saves) > 100 and len(remembered) > 10 and admitted, "the scenario ran"
    assert lost_saves == []
    assert lost_writes == [] and doubled == []
    assert not any(r.get("remember") not in ("added", "duplicate", "completed") for r in remembered)
    assert served == rebuilt
