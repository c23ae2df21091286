"""memvault's git attributes, merge drivers and conflict handling, with a real `git` (issue 44).

The drivers run as git runs them (`git merge` in a repository whose config `memvault git setup`
wrote), and directly through `memvault git merge-driver` with hostile sides: not UTF-8, a huge
line, conflict markers already inside, a missing file. Git's identity comes from the environment
and the global config is never read or written (GIT_CONFIG_GLOBAL points into tmp_path).
"""

import json
import random
import re
import subprocess
from pathlib import Path

import pytest

from memvault import MemoryStore
from memvault.vault.git_merge import merge, merge_graph
from memvault.vault.note import parse
from memvault.vault.note_conflicts import conflicted_ids
from tests.engine_helpers import memvault, memvault_json
from tests.git_helpers import git, isolate_git
from tests.postgres_helpers import init_flags
from tests.readonly_helpers import memvault_here

BULLET_RE = re.compile(r"^- (\d\d:\d\d) .* \^([A-Za-z0-9-]+)$", re.M)


@pytest.fixture(autouse=True)
def git_env(tmp_path, monkeypatch):
    isolate_git(tmp_path, monkeypatch)


def make_repo(tmp_path: Path, name: str = "vault", *, setup: bool = True) -> Path:
    root = tmp_path / name
    root.mkdir()
    git(root, "init", "-q")
    # the set-up runs in this process (memvault_here); the commands under test each run as a process
    assert memvault_here(root, "init", str(root), "--mode", "lite", "--time-zone", "UTC", *init_flags()) == 0
    if not setup:
        git(root, "config", "--local", "--remove-section", "merge.memvault-note")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "a new vault")
    return root


def ids_and_times(text: str) -> list[tuple[str, str]]:
    return [(time, block) for time, block in BULLET_RE.findall(text)]


def assert_one_memory_per_id_in_time_order(text: str) -> list[str]:
    pairs = ids_and_times(text)
    ids = [block for _, block in pairs]
    assert len(ids) == len(set(ids)), f"an id twice: {text}"
    times = [time for time, _ in pairs]
    assert times == sorted(times), f"not in time order: {text}"
    assert "<<<<<<<" not in text and ">>>>>>>" not in text
    return ids


def branch_and_merge(root: Path, relpath: str, base: str, ours: str, theirs: str) -> subprocess.CompletedProcess:
    """Commit `base`, change it to `theirs` on a branch and to `ours` on main, merge the branch."""
    path = root / relpath
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(base)
    git(root, "add", relpath)
    git(root, "commit", "-q", "--allow-empty", "-m", "base")
    git(root, "checkout", "-q", "-B", "theirs")
    path.write_text(theirs)
    git(root, "commit", "-qam", "theirs")
    git(root, "checkout", "-q", "main")
    path.write_text(ours)
    git(root, "commit", "-qam", "ours")
    return git(root, "merge", "-q", "--no-edit", "theirs", check=False)


# --- setup -----------------------------------------------------------------------------------


@pytest.mark.both_backends
def test_setup_is_idempotent_and_names_what_it_did(tmp_path):
    root = tmp_path / "vault"
    root.mkdir()
    git(root, "init", "-q")
    assert memvault(root, "init", str(root), "--time-zone", "UTC", *init_flags()).returncode == 0
    attributes = (root / ".gitattributes").read_bytes()
    assert b"daily/** merge=memvault-note" in attributes and b"graph.jsonl merge=memvault-graph" in attributes
    driver = git(root, "config", "--get", "merge.memvault-note.driver").stdout
    assert "-m memvault git merge-driver note %O %A %B %P" in driver
    config = (root / ".git" / "config").read_bytes()
    again = memvault_json(root, "git", "setup")
    assert again["changed"] is False and again["attributesAdded"] == [] and again["configSet"] == []
    assert (root / ".gitattributes").read_bytes() == attributes and (root / ".git" / "config").read_bytes() == config
    assert "Already set up" in memvault(root, "git", "setup").stdout


@pytest.mark.both_backends
def test_setup_never_clobbers_a_persons_own_attributes(tmp_path):
    root = make_repo(tmp_path)
    mine = "# my own rules\n*.png binary\ndaily/** merge=union\naudit/** text eol=lf\n"
    (root / ".gitattributes").write_text(mine)
    report = memvault_json(root, "git", "setup")
    text = (root / ".gitattributes").read_text()
    assert text.startswith(mine), "a person's lines moved or changed"
    assert "daily/** merge=memvault-note" not in text and report["attributesKept"] == ["daily/** merge=union"]
    assert "audit/** merge=memvault-note" in text  # other attributes combine with memvault's merge
    assert memvault_json(root, "git", "setup")["changed"] is False
    assert (root / ".gitattributes").read_text() == text


@pytest.mark.both_backends
def test_setup_outside_a_repository_is_a_clear_refusal_and_writes_nothing(tmp_path):
    root = tmp_path / "plain"
    assert memvault(root, "init", str(root), "--time-zone", "UTC", *init_flags()).returncode == 0
    assert (root / ".gitattributes").is_file()  # init writes them anyway: they travel with a first commit
    before = (root / ".gitattributes").read_bytes()
    done = memvault(root, "git", "setup")
    assert done.returncode == 1 and "not inside a git repository" in done.stderr and "git init" in done.stderr
    assert "Traceback" not in done.stderr
    assert (root / ".gitattributes").read_bytes() == before and not (root / ".git").exists()


# --- notes -------------------------------------------------------------------------------------

BASE = "# 2026-11-30\n\n- 08:00 The office opens at eight. ^m-0000000001\n"


@pytest.mark.both_backends
def test_both_machines_appending_the_same_day_merge_cleanly_in_time_order(tmp_path):
    root = make_repo(tmp_path)
    ours = BASE + "- 09:30 Laptop: the train leaves Thursday. ^m-000000000a\n- 12:00 Same fact. ^m-00000000ff\n"
    theirs = BASE + "- 09:00 Server: Morgan picked blue. ^t-000000000b\n- 13:10 Same fact. ^m-00000000ff\n"
    done = branch_and_merge(root, "daily/2026-11-30.md", BASE, ours, theirs)
    assert done.returncode == 0, done.stdout + done.stderr
    text = (root / "daily/2026-11-30.md").read_text()
    ids = assert_one_memory_per_id_in_time_order(text)
    assert ids == ["m-0000000001", "t-000000000b", "m-000000000a", "m-00000000ff"]
    assert "- 12:00 Same fact. ^m-00000000ff" in text  # the same fact once, at its earlier time
    assert git(root, "status", "--porcelain").stdout == ""


@pytest.mark.both_backends
def test_one_memory_edited_two_ways_stays_in_conflict_with_both_sides(tmp_path):
    root = make_repo(tmp_path)
    line = "- 09:00 The deploy color is blue. ^m-0000000002\n"
    done = branch_and_merge(root, "daily/2026-11-30.md", BASE + line, BASE + line.replace("blue", "green"),
                            BASE + line.replace("blue", "red"))  # fmt: skip
    assert done.returncode != 0
    text = (root / "daily/2026-11-30.md").read_text()
    assert "green" in text and "red" in text and "<<<<<<<" in text
    note = parse(text)
    assert {"The deploy color is green.", "The deploy color is red."} <= {b.text for b in note.bullets}
    assert "m-0000000002" in conflicted_ids(note)
    resolved = memvault(root, "git", "resolve", "daily/2026-11-30.md")
    assert resolved.returncode == 1 and "different text on the two sides" in resolved.stdout
    assert (root / "daily/2026-11-30.md").read_text() == text  # left for the person, untouched


@pytest.mark.both_backends
def test_a_persons_prose_merges_as_git_merges_it(tmp_path):
    root = make_repo(tmp_path)
    base = BASE + "\nSome prose a person wrote.\n\nMore prose.\n\nToday:\n\n"
    ours = base.replace("Some prose", "Some edited prose") + "- 10:00 Ours. ^m-000000000c\n"
    theirs = base.replace("More prose.", "More prose, edited.") + "- 09:00 Theirs. ^m-000000000d\n"
    assert branch_and_merge(root, "daily/2026-11-30.md", base, ours, theirs).returncode == 0
    text = (root / "daily/2026-11-30.md").read_text()
    assert "Some edited prose" in text and "More prose, edited." in text
    assert assert_one_memory_per_id_in_time_order(text) == ["m-0000000001", "m-000000000d", "m-000000000c"]


@pytest.mark.both_backends
def test_audit_notes_and_nested_day_notes_use_the_driver_too(tmp_path):
    root = make_repo(tmp_path)
    for relpath in ("audit/2026-11-30.md", "daily/2026/11/2026-11-30.md"):
        done = branch_and_merge(
            root, relpath, BASE, BASE + "- 11:00 A. ^m-00000000a1\n", BASE + "- 10:00 B. ^m-00000000b1\n"
        )
        assert done.returncode == 0, done.stderr
        assert assert_one_memory_per_id_in_time_order((root / relpath).read_text())[1:] == [
            "m-00000000b1",
            "m-00000000a1",
        ]


@pytest.mark.both_backends
@pytest.mark.parametrize("seed", range(6))
def test_random_days_on_two_machines_lose_and_duplicate_nothing(tmp_path, seed):
    rng = random.Random(seed)
    root = make_repo(tmp_path)
    shared = [f"- {h:02d}:{rng.randrange(60):02d} Shared {h}. ^m-{h:010x}\n" for h in sorted(rng.sample(range(24), 3))]
    base = "# 2026-11-30\n\n" + "".join(shared)

    def side(prefix: int) -> tuple[str, set[str]]:
        added = {}
        for _ in range(rng.randrange(1, 8)):
            minute = rng.randrange(24 * 60)
            block = f"m-{prefix:02x}{rng.randrange(16**8):08x}"
            added[block] = f"- {minute // 60:02d}:{minute % 60:02d} Fact {block}. ^{block}\n"
        both = rng.choice(shared)  # a fact both machines remembered again: its id is its content's
        return base + "".join(added.values()) + both, set(added)

    ours, ours_ids = side(1)
    theirs, theirs_ids = side(2)
    done = branch_and_merge(root, "daily/2026-11-30.md", base, ours, theirs)
    assert done.returncode == 0, done.stderr
    ids = assert_one_memory_per_id_in_time_order((root / "daily/2026-11-30.md").read_text())
    expected = {re.search(r"\^(\S+)", line)[1] for line in shared} | ours_ids | theirs_ids
    assert set(ids) == expected and len(ids) == len(expected)


def test_line_endings_and_a_missing_final_newline_survive():
    base = BASE.replace("\n", "\r\n")
    ours = base + "- 10:00 Ours. ^m-000000000c"  # no final newline
    theirs = base + "- 09:00 Theirs. ^m-000000000d\r\n"
    outcome = merge("note", base.encode(), ours.encode(), theirs.encode())
    assert outcome.clean
    text = outcome.data.decode()
    assert "- 09:00 Theirs. ^m-000000000d\r\n- 10:00 Ours. ^m-000000000c" in text
    assert assert_one_memory_per_id_in_time_order(text.replace("\r\n", "\n"))


# --- the driver's own command line, with hostile input ------------------------------------------


def run_driver(
    tmp_path: Path, kind: str, base: bytes, ours: bytes, theirs: bytes
) -> tuple[subprocess.CompletedProcess, bytes]:
    paths = []
    for name, data in (("O", base), ("A", ours), ("B", theirs)):
        path = tmp_path / f"side-{name}"
        path.write_bytes(data)
        paths.append(str(path))
    done = memvault(tmp_path, "git", "merge-driver", kind, *paths, "daily/2026-11-30.md")
    return done, Path(paths[1]).read_bytes()


def test_a_side_that_is_not_utf8_is_left_in_conflict_with_every_line(tmp_path):
    base = BASE.encode()
    ours = base + b"- 10:00 broken \xff bytes ^m-000000000c\n"
    theirs = base + b"- 09:00 Theirs. ^m-000000000d\n"
    done, result = run_driver(tmp_path, "note", base, ours, theirs)
    assert done.returncode == 1 and "not UTF-8" in done.stderr and "Traceback" not in done.stderr
    assert b"broken \xff bytes" in result and b"Theirs." in result and b"<<<<<<<" in result


def test_conflict_markers_already_in_a_side_are_never_resolved_by_the_driver(tmp_path):
    base = BASE.encode()
    ours = base + b"<<<<<<< HEAD\n- 10:00 left over ^m-000000000c\n=======\n>>>>>>> x\n"
    theirs = base + b"- 09:00 Theirs. ^m-000000000d\n"
    done, result = run_driver(tmp_path, "note", base, ours, theirs)
    assert done.returncode == 1 and "already held conflict markers" in done.stderr
    assert b"left over" in result and b"Theirs." in result


def test_huge_lines_and_garbage_lines_are_kept_whole(tmp_path):
    huge = "- 10:00 " + "x" * (2 * 1024 * 1024) + " ^m-000000000c\n"
    garbage = "\x00\x01 not markdown at all }{ ][\n"
    done, result = run_driver(tmp_path, "note", BASE.encode(), (BASE + huge + garbage).encode(),
                              (BASE + "- 09:00 Theirs. ^m-000000000d\n").encode())  # fmt: skip
    assert done.returncode == 0, done.stderr
    text = result.decode()
    assert huge in text and garbage in text and "- 09:00 Theirs. ^m-000000000d\n" in text


def test_a_side_over_the_note_limit_is_left_to_a_person(tmp_path):
    big = BASE.encode() + b"- 10:00 " + b"y" * (16 * 1024 * 1024) + b"\n"
    done, result = run_driver(tmp_path, "note", BASE.encode(), big, BASE.encode() + b"- 09:00 T. ^m-000000000d\n")
    assert done.returncode == 1 and "over" in done.stderr and "Traceback" not in done.stderr
    assert b"- 09:00 T. ^m-000000000d" in result and b"y" * 1000 in result


def test_a_missing_side_is_a_clear_error(tmp_path):
    done = memvault(tmp_path, "git", "merge-driver", "note", "nope-O", str(tmp_path / "gone-A"), "nope-B")
    assert done.returncode == 1 and "memvault merge driver" in done.stderr and "Traceback" not in done.stderr
    bad = memvault(tmp_path, "git", "merge-driver", "spreadsheet", "a", "b", "c")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


# --- graph.jsonl -----------------------------------------------------------------------------------


def entity(eid: str, name: str) -> str:
    return json.dumps({"id": eid, "kind": "entity", "name": name, "type": "person"}, sort_keys=True)


def relation(a: str, b: str) -> str:
    return json.dumps({"from": a, "kind": "relation", "relation": "knows", "to": b}, sort_keys=True)


def fact(fid: str, entities: list[str], salience: float) -> str:
    body = {"entities": entities, "id": fid, "kind": "fact", "salience": salience, "source": "daily/2026-11-30.md"}
    return json.dumps(body, sort_keys=True)


def lines(*items: str) -> str:
    return "".join(item + "\n" for item in items)


@pytest.mark.both_backends
def test_graph_edges_are_deduplicated_in_a_deterministic_order(tmp_path):
    root = make_repo(tmp_path)
    base = lines(entity("e-1", "Morgan"), entity("e-9", "Old"))
    ours = lines(entity("e-9", "Old"), entity("e-1", "Morgan"), entity("e-2", "Sam"), relation("e-1", "e-2"),
                 fact("f-1", ["e-1"], 0.5))  # fmt: skip
    theirs = lines(entity("e-1", "Morgan"), relation("e-1", "e-2"), entity("e-2", "Sam"), entity("e-3", "Kim"),
                   fact("f-1", ["e-2"], 0.8))  # theirs deleted e-9 # fmt: skip
    done = branch_and_merge(root, "graph.jsonl", base, ours, theirs)
    assert done.returncode == 0, done.stderr
    merged = (root / "graph.jsonl").read_text().splitlines()
    bodies = [json.loads(line) for line in merged]
    assert [b.get("id") or (b["from"], b["to"]) for b in bodies] == ["e-1", "e-2", "e-3", "f-1", ("e-1", "e-2")]
    assert bodies[3]["entities"] == ["e-1", "e-2"] and bodies[3]["salience"] == 0.8
    assert len(merged) == len(set(merged))
    from memvault.vault.graph import parse_graph

    graph = parse_graph((root / "graph.jsonl").read_bytes())  # what capture reads: valid
    assert set(graph.entities) == {"e-1", "e-2", "e-3"} and len(graph.relations) == 1


def test_graph_merge_keeps_garbage_and_huge_lines_and_is_the_same_either_way():
    base = lines(entity("e-1", "Morgan"))
    huge = entity("e-7", "z" * (1024 * 1024))
    ours = (
        base
        + "not json at all\n"
        + huge
        + "\n"
        + '{"kind": "entity", "id": "e-1", "name": "Morgan", "type": "person"}\n'
    )
    theirs = base + "[1, 2]\n" + relation("e-1", "e-7") + "\n"
    merged = merge_graph(base, ours, theirs)
    assert "not json at all\n" in merged and "[1, 2]\n" in merged and "z" * (1024 * 1024) in merged
    assert merged.count('"id":"e-1"') == 1
    swapped = merge_graph(base, theirs, ours)
    assert sorted(merged.splitlines()) == sorted(swapped.splitlines())
    assert merge_graph(merged, merged, merged) == merged  # a merge of a merge changes nothing


# --- index.md -----------------------------------------------------------------------------------


@pytest.mark.both_backends
def test_index_block_conflicts_take_ours_and_a_persons_text_stays_in_conflict(tmp_path):
    root = make_repo(tmp_path)
    block = "<!-- memvault:consolidate:start -->\n- counts: {n}\n<!-- memvault:consolidate:end -->\n"
    base = "# Memory index\n\nMy notes.\n\n" + block.format(n=1)
    done = branch_and_merge(root, "index.md", base, base.replace("n: 1", "n: 1").replace("counts: 1", "counts: 3"),
                            base.replace("counts: 1", "counts: 2"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "counts: 3" in (root / "index.md").read_text() and "<<<<<<<" not in (root / "index.md").read_text()
    text = (root / "index.md").read_text()
    done = branch_and_merge(
        root, "index.md", text, text.replace("My notes.", "Mine."), text.replace("My notes.", "Yours.")
    )
    assert (
        done.returncode != 0
        and "Mine." in (root / "index.md").read_text()
        and "Yours." in (root / "index.md").read_text()
    )


# --- a conflict git left (no driver): searchable, marked, unhealthy, resolvable -----------------


@pytest.mark.both_backends
def test_a_conflict_left_by_git_stays_searchable_marked_and_unhealthy_until_resolved(tmp_path):
    root = make_repo(tmp_path, setup=False)
    done = branch_and_merge(root, "daily/2026-11-30.md", BASE, BASE + "- 10:00 Laptop saw a heron. ^m-000000000c\n",
                            BASE + "- 09:00 Server saw a kingfisher.\n")  # fmt: skip
    assert done.returncode != 0, "the test needs git's plain merge to leave markers"
    with MemoryStore.open(root) as store:
        assert [hit.text for hit in store.recall("heron").hits][:1] == ["Laptop saw a heron."]
        assert [hit.text for hit in store.recall("kingfisher").hits][:1] == ["Server saw a kingfisher."]
    found = memvault_json(root, "search", "heron")["hits"][0]
    assert found["conflict"] is True and found["source"] == "daily/2026-11-30.md#^m-000000000c"
    assert memvault_json(root, "search", "office opens")["hits"][0]["conflict"] is False
    assert "in conflict: hits from daily/2026-11-30.md" in memvault(root, "search", "kingfisher").stdout
    health = memvault(root, "health")
    assert health.returncode == 1 and "daily/2026-11-30.md" in health.stdout
    assert "memvault git resolve daily/2026-11-30.md" in health.stdout
    resolved = memvault(root, "git", "resolve")
    assert resolved.returncode == 0 and "git add daily/2026-11-30.md" in resolved.stdout, resolved.stderr
    text = (root / "daily/2026-11-30.md").read_text()
    assert text == BASE + "- 09:00 Server saw a kingfisher.\n- 10:00 Laptop saw a heron. ^m-000000000c\n"
    health = memvault(root, "health")
    assert health.returncode == 0, health.stdout + health.stderr
    assert memvault_json(root, "search", "heron")["hits"][0]["conflict"] is False
    assert "No note holds conflict markers" in memvault(root, "git", "resolve").stdout


@pytest.mark.both_backends
def test_resolve_refuses_what_is_not_a_note(tmp_path):
    root = make_repo(tmp_path)
    for name, words in (("graph.jsonl", "not a daily/ or audit/ note"), ("daily/2026-01-01.md", "does not exist"),
                        ("../outside.md", "not a daily/ or audit/ note")):  # fmt: skip
        done = memvault(root, "git", "resolve", name)
        assert done.returncode == 1 and words in done.stderr and "Traceback" not in done.stderr, done


@pytest.mark.both_backends
def test_health_names_a_clone_that_lacks_the_drivers_and_setup_fixes_it(tmp_path):
    root = make_repo(tmp_path)
    hub = tmp_path / "hub.git"
    git(tmp_path, "clone", "-q", "--bare", str(root), str(hub))
    fresh = tmp_path / "fresh"
    git(tmp_path, "clone", "-q", str(hub), str(fresh))
    report = memvault_json(fresh, "health")
    finding = next(f for f in report["findings"] if f["code"] == "git_drivers_missing")
    assert finding["severity"] == "warning" and finding["subject"] == ".gitattributes"
    assert "memvault-note" in finding["message"] and finding["fix"].startswith("memvault git setup")
    # a warning: everything works, merges just need a person more often
    assert all(f["severity"] == "warning" for f in report["findings"] if f["check"] == "git")
    memvault_json(fresh, "git", "setup")
    assert "git_drivers_missing" not in {f["code"] for f in memvault_json(fresh, "health")["findings"]}
    assert "git_drivers_missing" not in {f["code"] for f in memvault_json(root, "health")["findings"]}


# --- the replay sidecar ---------------------------------------------------------------------------


def sidecar(*entries: dict) -> bytes:
    from memvault.vault.replay import ReplayState, identity, render_state

    return render_state(ReplayState({identity(entry): entry for entry in entries}))


def capture_entry(run_hex: str, facts: list[str]) -> dict:
    authority = {"digest": "a" * 64, "kind": "capture"}
    return {"at": "2026-11-30T09:00:00.000000Z", "authority": authority, "facts": facts, "kind": "capture",
            "run": run_hex * 64}  # fmt: skip


def edge_entry(a: str, b: str, weight: int) -> dict:
    authority = {"digest": "b" * 64, "kind": "capture"}
    return {"authority": authority, "from": a, "kind": "edge", "to": b, "type": "thread", "weight": weight}


def test_the_replay_sidecar_merges_by_identity_and_stays_canonical(tmp_path):
    from memvault.vault.replay import parse_state

    base = sidecar(capture_entry("1", ["m-0000000001"]))
    ours = sidecar(capture_entry("1", ["m-0000000001"]), capture_entry("2", ["m-0000000002"]))
    theirs = sidecar(capture_entry("1", ["m-0000000001"]), capture_entry("3", ["m-0000000003"]),
                     edge_entry("m-0000000001", "m-0000000003", 2))  # fmt: skip
    done, result = run_driver(tmp_path, "replay", base, ours, theirs)
    assert done.returncode == 0, done.stderr
    state = parse_state(result, "merged")  # canonical bytes: exactly what render_state writes
    assert sorted(key[0] for key in state.entries) == ["capture", "capture", "capture", "edge"]
    clash = sidecar(capture_entry("1", ["m-0000000001"]), edge_entry("m-0000000001", "m-0000000003", 5))
    done, result = run_driver(tmp_path, "replay", base, clash, theirs)
    assert done.returncode == 1 and "differs on the two sides" in done.stderr and result == clash
    done, result = run_driver(tmp_path, "replay", base, b'{"entries":[],"v":1} trailing\n', theirs)
    assert done.returncode == 1 and "left to a person" in done.stderr and "Traceback" not in done.stderr


# --- time order by instant ------------------------------------------------------------------------

FOLD_DAY = "2026-10-25"  # Europe/Amsterdam repeats 02:00-03:00 that night (CEST +02:00, then CET +01:00)


def remember_on(root: Path, text: str, at: str) -> str:
    receipt = memvault_json(root, "remember", "--at", at, text)
    assert receipt["status"] == "added", receipt
    return receipt["source"].partition("#^")[2]


@pytest.mark.both_backends
def test_a_merge_orders_two_machines_bullets_by_instant_across_offsets(tmp_path):
    root = tmp_path / "vault"
    root.mkdir()
    git(root, "init", "-q")
    assert (
        memvault(root, "init", str(root), "--mode", "lite", "--time-zone", "Europe/Amsterdam", *init_flags()).returncode
        == 0
    )
    note = root / f"daily/{FOLD_DAY}.md"
    early = remember_on(root, "Both: the night shift starts.", f"{FOLD_DAY}T01:45:00+02:00")  # 23:45 UTC
    git(root, "add", "-A")
    git(root, "commit", "-qm", "base")
    git(root, "checkout", "-q", "-B", "server")
    second_pass = remember_on(root, "Server: the backup ran in the repeated hour.", f"{FOLD_DAY}T01:10:00Z")
    late = remember_on(root, "Server: the shift ends.", f"{FOLD_DAY}T03:15:00+01:00")  # 02:15 UTC
    with note.open("a") as out:  # a person on a machine in India wrote their own offset
        out.write("- 05:00+05:30 Pune: the overnight report is in. ^m-0000000051\n")  # 23:30 UTC the day before
    git(root, "commit", "-qam", "server")
    git(root, "checkout", "-q", "main")
    first_pass = remember_on(root, "Laptop: the deploy ran in the first 02:30.", f"{FOLD_DAY}T00:30:00Z")
    git(root, "commit", "-qam", "laptop")
    theirs_before = git(root, "show", f"server:daily/{FOLD_DAY}.md").stdout
    done = git(root, "merge", "-q", "--no-edit", "server", check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    text = note.read_text()
    assert "<<<<<<<" not in text
    rows = re.findall(r"^- (\S+) .* \^([A-Za-z0-9-]+)$", text, re.M)
    # by instant: 23:30Z (+05:30), 23:45Z, 00:30Z (02:30+02:00), 01:10Z (02:10+01:00), 02:15Z;
    # by wall time the repeated hour's 02:10 would come before 02:30, and 05:00 last
    assert [block for _, block in rows] == ["m-0000000051", early, first_pass, second_pass, late], text
    assert [time for time, _ in rows] == ["05:00+05:30", "01:45", "02:30+02:00", "02:10+01:00", "03:15"]
    for line in theirs_before.splitlines()[2:]:
        assert line in text.splitlines(), f"a line changed: {line}"  # ids and texts as written


@pytest.mark.both_backends
def test_resolve_orders_by_instant_too_and_keeps_ties_in_place(tmp_path):
    root = tmp_path / "vault"
    root.mkdir()
    git(root, "init", "-q")
    assert (
        memvault(root, "init", str(root), "--mode", "lite", "--time-zone", "Europe/Amsterdam", *init_flags()).returncode
        == 0
    )
    git(root, "config", "--local", "--remove-section", "merge.memvault-note")  # git's plain conflict
    relpath = f"daily/{FOLD_DAY}.md"
    base = f"# {FOLD_DAY}\n\n- 01:00 Base. ^m-00000000b0\n"
    ours = base + "- 02:30+02:00 First pass. ^m-00000000a1\n- 02:40+02:00 Tie, ours. ^m-00000000a2\n"
    theirs = base + "- 02:10+01:00 Second pass. ^m-00000000c1\n- 01:40+01:00 Tie, theirs. ^m-00000000c2\n"
    done = branch_and_merge(root, relpath, base, ours, theirs)
    assert done.returncode != 0 and "<<<<<<<" in (root / relpath).read_text()
    resolved = memvault_json(root, "git", "resolve", relpath)
    assert resolved["notes"][0]["resolved"], resolved
    ids = re.findall(r"\^([a-z0-9-]+)$", (root / relpath).read_text(), re.M)
    # 02:40+02:00 and 01:40+01:00 are one instant (00:40 UTC): ours first, as the hunk had them
    assert ids == ["m-00000000b0", "m-00000000a1", "m-00000000a2", "m-00000000c2", "m-00000000c1"]


def test_order_bullets_without_a_zone_keeps_wall_time_order():
    from memvault.vault.note_conflicts import order_bullets

    lines = ["- 02:30+02:00 a ^m-1\n", "- 02:10+01:00 b ^m-2\n"]
    assert order_bullets(lines) == lines[::-1]  # no zone known: by wall time, as before
    from datetime import date
    from zoneinfo import ZoneInfo

    assert order_bullets(lines, date(2026, 10, 25), ZoneInfo("Europe/Amsterdam")) == lines
