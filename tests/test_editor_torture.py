"""Issue 14, finding 1: a person saving a note while memvault writes to it loses nothing.

Real processes only: a person-save loop (temp-and-rename and in-place truncate-and-write, each
at 20 Hz and at 1 Hz) on the one note that two memvault processes write to (Remember in both,
turn admission in one, as clients of `memvault watch`, the vault's owner, which writes, projects
the turns and follows the edits). A fixed amount of work, not a wall time: the person's 106 saves
(editor_torture_driver.PHASES), with the memvault loops writing all through them (at least 20
rounds each, on until the person is done). Then: every person save
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
RUN_TIMEOUT = 300.0  # generous: the person's saves take about 11 s, the loops end right after them
SETTLE_SECONDS = 120.0  # generous: the owner projects the last admitted turns after the loops end


def _spawn(*args: str, stderr=None) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, *args], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True
    )  # fmt: skip  (stderr None: a failing driver's traceback shows)


def _events(proc: subprocess.Popen, timeout: float) -> list[dict]:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"{proc.args} exited {proc.returncode}"
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


@pytest.mark.one_engine(
    "four busy processes are too much CPU to run twice in the suite's budget; the server's side of it (an"
    " owner's sync beside clients' writes, a person's saves repaired through a sync) runs on both "
    "backends in test_editor_findings.py, test_editor_repair.py and test_watch.py"
)
@pytest.mark.slow
def test_person_saves_and_memvault_writes_all_survive_a_minute_of_contention(new_vault, tmp_path):
    note = new_vault / NOTE
    note.parent.mkdir(exist_ok=True)
    note.write_text("---\ntimeZone: UTC\n---\n# 2026-11-30\n\nNotes typed by a person.\n", encoding="utf-8")
    log = tmp_path / "watch.log"  # a file, not a pipe: the batch lines could fill a pipe and stall it
    stop = tmp_path / "person-done"  # the memvault loops write until the person's saves are done
    with open(log, "w") as watch_log:
        watch = _spawn("-m", "memvault", "--vault", str(new_vault), "watch", "--debounce", "0.05", stderr=watch_log)
    deadline = time.monotonic() + 60
    while "watching" not in log.read_text() and watch.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "watching" in log.read_text(), log.read_text()
    try:
        person = _spawn(str(DRIVER), "person", str(new_vault), NOTE, "-")
        alpha = _spawn(str(DRIVER), "remember", str(new_vault), "alpha", str(stop))
        beta = _spawn(str(DRIVER), "admit", str(new_vault), "beta", str(stop))
        try:
            saves = _events(person, timeout=RUN_TIMEOUT)
        finally:
            stop.touch()
        receipts = _events(alpha, timeout=RUN_TIMEOUT) + _events(beta, timeout=RUN_TIMEOUT)
        pending = new_vault / ".capture-intake" / "pending"
        deadline = time.monotonic() + SETTLE_SECONDS
        while any(pending.iterdir()) and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        watch.send_signal(signal.SIGTERM)
        watch.communicate(timeout=60)

    with MemoryStore.open(new_vault) as store:  # no owner now: the sync on open repairs a dropped line
        assert not any(pending.iterdir()), "every admitted turn was projected"
        text = note.read_text("utf-8")
        lost_saves = [s["person"] for s in saves if f"- person edit {s['person']} in {s['style']} style\n" not in text]
        remembered = [r for r in receipts if "remember" in r]
        admitted = [r for r in receipts if r.get("admit") == "admitted"]
        copies = {r["id"]: text.count(f"^{r['id']}") for r in remembered}
        copies |= {f"t-{r['intake_id'][:10]}": text.count(f"^t-{r['intake_id'][:10]}") for r in admitted}
        lost_writes = sorted(i for i, n in copies.items() if n == 0)
        doubled = sorted(i for i, n in copies.items() if n > 1)
        served = store.writable_index().all_rows()
        store.rebuild()
        rebuilt = store.writable_index().all_rows()
    print(
        f"\nperson saves: {len(saves)} ({sum(s['style'] == 'rename' for s in saves)} rename, "
        f"{sum(s['style'] == 'inplace' for s in saves)} in place), lost {len(lost_saves)}; "
        f"memvault writes: {len(remembered)} remember, {len(admitted)} admitted turns, "
        f"lost {len(lost_writes)}, duplicated {len(doubled)}; index rows {len(served)}, rebuild {len(rebuilt)}"
    )
    assert len(saves) > 100 and len(remembered) > 10 and admitted, "the scenario ran"
    assert lost_saves == []
    assert lost_writes == [] and doubled == []
    assert not any(r.get("remember") not in ("added", "duplicate", "completed") for r in remembered)
    assert served == rebuilt
