"""The owner's cycle collector (indexer/maintenance/collector.py), in a fresh interpreter each:
the settings are the process's, and pytest's own must stay as they are."""

import json
import subprocess
import sys

import pytest

#: a process that keeps what it allocates, as an owner caches each version of a day's note
#: (moved copies of 20,000 memories a save), and counts the full collections that run meanwhile
_CACHING = """
import gc, json, sys
from dataclasses import dataclass
from memvault.indexer.maintenance.collector import collect_while_idle, settle_for_a_resident_owner

@dataclass(frozen=True)
class Memory:
    line: int
    text: str

if sys.argv[1] == "settled":
    settle_for_a_resident_owner()
full = []
gc.callbacks.append(lambda phase, info: full.append(1) if phase == "stop" and info["generation"] == 2 else None)
versions = []
for save in range(40):
    versions.append(tuple(Memory(line + save, "fact") for line in range(20_000)))
    del versions[:-4]  # the last few versions stay cached
during = len(full)
cycle = []
cycle.append(cycle)  # a cycle dropped: only the collector frees it
del cycle
collect_while_idle()
print(json.dumps({"during": during, "freed": gc.garbage == [] and len(full) > during}))
"""


def _full_collections(mode: str) -> dict:
    done = subprocess.run([sys.executable, "-c", _CACHING, mode], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("mode", ["settled", "default"])
def test_an_owner_caching_versions_of_a_big_note_runs_no_full_collection_until_idle(mode):
    """CPython's defaults walk every object the owner holds, many times, while it caches
    versions of a day's note; settled for a resident owner, none runs until it is idle."""
    counts = _full_collections(mode)
    if mode == "settled":
        assert counts == {"during": 0, "freed": True}
    else:
        assert counts["during"] >= 5  # what the owner paid before (the setting's reason)
