"""The README's first command, `python -m memvault.cli.tour`, as a new user runs it."""

import subprocess
import sys
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest


@pytest.mark.one_engine(
    "the tour is the README's offline first run: it writes its vault's memvault.json itself (a Journal vault "
    "indexed in .index/) and has no option that names an index server"
)
def test_the_tour_runs_on_todays_note_and_says_where_its_vault_is(tmp_path):
    target = tmp_path / "tour-vault"
    before = datetime.now(ZoneInfo("Europe/Amsterdam")).date().isoformat()
    done = subprocess.run([sys.executable, "-m", "memvault.cli.tour", str(target)], capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    assert "Traceback" not in done.stderr
    after = datetime.now(ZoneInfo("Europe/Amsterdam")).date().isoformat()
    today = before if f"added: daily/{before}.md" in done.stdout else after  # the tour may straddle midnight
    note = target / "daily" / f"{today}.md"
    assert "Morgan chose blue as the deployment color. ^m-56e9dbdc5e" in note.read_text()
    assert done.stdout.count("# expect: ") == done.stdout.count("$ memvault ") >= 10
    assert f"duplicate: daily/{today}.md#^m-56e9dbdc5e" in done.stdout
    assert done.stdout.rstrip().endswith(f"remove it with: rm -rf {target}")


def test_the_tour_refuses_to_overwrite_a_folder(tmp_path):
    done = subprocess.run([sys.executable, "-m", "memvault.cli.tour", str(tmp_path)], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 1 and "already exists" in done.stderr
