"""Recall ranked in a client's own process (indexer/engine/client_reads.py), with a real owner
process: the answers equal the owner's, every acknowledged write is found whichever client wrote
it and whether or not its commit happened, pending rows travel once, found memories reach the
owner's access log, and malformed read-view requests are refused with the owner still serving."""

import json
import subprocess
import sys
from contextlib import contextmanager

import pytest

from memvault import MemoryStore
from memvault.indexer.engine.client_reads import ClientReads, ReadsThroughOwner
from memvault.indexer.engine.remote import recall_result_from_json
from memvault.indexer.search.telemetry import AccessLog
from memvault.vault.config import load_config
from memvault.vault.errors import InvalidRecord
from memvault.vault.layout import VaultLayout
from tests.engine_helpers import ENV, REPO, TIMEOUT, OwnerProcess, memvault, wait_for
from tests.intake_helpers import make_vault
from tests.test_engine_reads import HeldOwner, committed_texts

pytestmark = pytest.mark.slow

#: a client ranks recalls in its own process only where the index's files are on this machine
#: (`MemoryStore.index_files_on_this_machine`); a server-indexed vault's recalls stay in the owner
CLIENT_RANKS_HERE = pytest.mark.one_engine("a client ranks recalls itself only beside the local engine's files")

FACTS = [
    "Morgan chose blue as the deployment color for the staging cluster.",
    "The harbour crane lifted crates of copper on Tuesday.",
    "Priya moved the weekly sync to Thursday mornings.",
    "The backup job writes to the cold storage bucket every night.",
    "Morgan prefers green tea over coffee during reviews.",
    "The release train leaves every second Wednesday.",
]


@contextmanager
def client_of_an_owner(tmp_path, tier: str = "journal", vault=None):
    """(vault, this process's RemoteStore of it) while `memvault serve` owns it; the owner's
    stderr must hold no traceback when it stops."""
    root = vault or make_vault(tmp_path, mode=tier)
    owner = OwnerProcess(root, "serve").wait_serving()
    try:
        with MemoryStore.open(root) as store:
            assert type(store).__name__ == "RemoteStore"
            yield root, store
    finally:
        assert "Traceback" not in owner.stop()


def owners_answer(store, query: str, limit: int = 10, mode: str = "tool") -> dict:
    """What the owner itself answers for this recall (its JSON, as a client gets it)."""
    body = store.client.call("recall", {"query": query, "limit": limit, "mode": mode})
    return recall_result_from_json(body).to_json(explain=True)


def settled(store) -> None:
    """Vectors follow writes in the owner's background: drain them, so two answers compare."""
    store.client.call("health", {"strict": True})


def warm(store) -> None:
    """A RemoteStore ranks here from its second recall on: pass the first."""
    store.recall("warm up", limit=1)
    assert isinstance(store._reads_here(), ClientReads)


@CLIENT_RANKS_HERE
@pytest.mark.parametrize("tier", ["journal", "bujo"])
def test_a_long_lived_client_ranks_recalls_itself_and_answers_as_the_owner(tmp_path, tier):
    with client_of_an_owner(tmp_path, tier) as (_, store):
        store.remember_many(FACTS)
        settled(store)
        store.recall("which color did Morgan choose?")  # the first recall: through the owner
        assert store._reads is None
        asked = [
            ("which color did Morgan choose?", 10, "tool"),
            ("Morgan", 3, "tool"),
            ("copper crane", 25, "tool"),
            ("when is the weekly sync?", 10, "auto"),
            ("what did we decide last week?", 10, "tool"),
            ("zzz unknown words qqq", 10, "tool"),
        ]
        for query, limit, mode in asked:
            here = store.recall(query, limit=limit, mode=mode).to_json(explain=True)
            assert here == owners_answer(store, query, limit, mode), query
        assert store._reads.answered == len(asked)
        for bad in ({"limit": 0}, {"limit": True}, {"mode": "psychic"}, {"query": None}):
            args = {"query": "Morgan", "limit": 10, "mode": "tool", **bad}
            with pytest.raises(InvalidRecord) as here:
                store.recall(**args)
            with pytest.raises(InvalidRecord) as there:
                store.client.call("recall", args)
            assert str(here.value) == str(there.value)


@CLIENT_RANKS_HERE
def test_another_clients_write_is_found_here_before_and_after_its_commit(tmp_path):
    """Client A (a CLI process) remembers; the owner's commit of it is held. This client, ranking
    in its own process, finds it among the owner's pending rows; once the commit lands it finds
    it in the committed index (its reader refreshed after the owner's answer), once."""
    root = make_vault(tmp_path, mode="journal")
    owner = HeldOwner(root, tmp_path / "flags")
    try:
        with MemoryStore.open(root) as store:
            warm(store)
            fact = "The quartermaster moved the spare sails to locker nine."
            assert memvault(root, "remember", fact).returncode == 0
            wait_for(lambda: (owner.flags / "blocked").exists(), what="the owner's commit to start (and be held)")
            assert fact not in committed_texts(root, "quartermaster sails locker")
            before = [hit.text for hit in store.recall("where are the spare sails?").hits]
            assert before[:1] == [fact] and store._reads.answered == 1
            (owner.flags / "release").touch()
            wait_for(lambda: fact in committed_texts(root, "quartermaster sails locker"), what="the commit")
            wait_for(lambda: not store.client.call("read_view", {"query": "x"})["keys"], what="no pending rows")
            after = [hit.text for hit in store.recall("where are the spare sails?").hits]
            assert after.count(fact) == 1 and after[0] == fact and store._reads.answered == 2
    finally:
        owner.release_and_stop()


WRITER = """
import sys
from memvault import MemoryStore
store = MemoryStore.open(sys.argv[1])
for n in range(int(sys.argv[2])):
    word = f"zeppelin{n}kestrel"
    store.remember(f"The hangar log notes {word} docked at bay {n}.")
    print(word, flush=True)
"""


@CLIENT_RANKS_HERE
def test_threads_of_a_client_find_every_write_another_process_acknowledged(tmp_path):
    """Another process remembers and prints each word once its remember is acknowledged; four
    threads of this client then search for it at once, ranking here: none misses it."""
    from concurrent.futures import ThreadPoolExecutor

    with client_of_an_owner(tmp_path) as (root, store):
        warm(store)
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(root), "15"],
            env=ENV,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        misses = []
        with ThreadPoolExecutor(max_workers=4) as pool:
            for line in writer.stdout:
                word = line.strip()

                def found_by_recall(_, word=word):
                    return any(word in hit.text for hit in store.recall(word, limit=5).hits)

                found = pool.map(found_by_recall, range(4))
                misses += [word for hit in found if not hit]
        assert writer.wait(timeout=TIMEOUT) == 0, writer.stderr.read()
        assert misses == [] and store._reads.answered > 0  # a recall may go through the owner (a merge)


@CLIENT_RANKS_HERE
def test_pending_rows_travel_once_within_an_epoch(tmp_path):
    """The owner sends the rows added after the version a client holds, and every pending key;
    a client of another epoch (a restarted owner) gets every row again."""
    root = make_vault(tmp_path, mode="journal")
    owner = HeldOwner(root, tmp_path / "flags")
    try:
        with MemoryStore.open(root) as store:
            store.remember("The first pending memory is about anchors.")
            wait_for(lambda: (owner.flags / "blocked").exists(), what="the held commit")
            first = store.client.call("read_view", {"query": "anchors"})
            assert [row["text"] for row in first["rows"]] == ["The first pending memory is about anchors."]
            store.remember("The second pending memory is about rudders.")
            since = max(row["version"] for row in first["rows"])
            second = store.client.call("read_view", {"query": "rudders", "since": since, "epoch": first["epoch"]})
            assert [row["text"] for row in second["rows"]] == ["The second pending memory is about rudders."]
            added = second["rows"][0]
            assert set(second["keys"]) == set(first["keys"]) | {added["path"] + "#" + added["id"]}
            other = store.client.call("read_view", {"query": "rudders", "since": since, "epoch": "another-owner"})
            assert len(other["rows"]) == 2 and other["epoch"] == first["epoch"]
            warm(store)
            found = {hit.text for hit in store.recall("anchors rudders", limit=5).hits}
            assert {
                "The first pending memory is about anchors.",
                "The second pending memory is about rudders.",
            } <= found
    finally:
        owner.release_and_stop()


@CLIENT_RANKS_HERE
def test_found_memories_reach_the_owners_access_log(tmp_path):
    with client_of_an_owner(tmp_path) as (root, store):
        receipt = store.remember(FACTS[0])
        warm(store)
        assert store.recall("deployment color").hits[0].source == receipt.source
    counts = AccessLog(root, VaultLayout(root).index_dir).read()  # the owner wrote it as it stopped
    assert counts.get(receipt.source.replace("#^", "#"), {}).get("count", 0) >= 1, counts


@CLIENT_RANKS_HERE
def test_a_rebuild_moves_the_client_to_the_new_generation(tmp_path):
    with client_of_an_owner(tmp_path) as (root, store):
        store.remember_many(FACTS)
        warm(store)
        store.recall("Morgan")
        old = store._reads._bm25[0]
        assert memvault(root, "rebuild").returncode == 0
        settled(store)
        here = store.recall("which color did Morgan choose?").to_json(explain=True)
        assert store._reads._bm25[0] != old
        assert here == owners_answer(store, "which color did Morgan choose?")
        assert here["hits"][0]["text"] == FACTS[0]


@pytest.mark.both_backends
def test_every_backend_answers_a_warm_client_and_a_server_index_keeps_recalls_in_the_owner(tmp_path):
    """Lite vault. On the local index the client ranks here; on an index server the owner says
    so (`reads: owner`) and every recall goes through it, with the same answers."""
    root = make_vault(tmp_path)
    local = load_config(root, {}).index.backend == "local"
    with client_of_an_owner(tmp_path, vault=root) as (_, store):
        store.remember_many(FACTS)
        settled(store)
        warm(store)
        for query in ("Morgan", "copper crane", "weekly sync"):
            assert store.recall(query).to_json(explain=True) == owners_answer(store, query)
        assert bool(store._reads) is local
        if local:
            assert store._reads.answered == 3


@pytest.mark.one_engine(
    "it asks the client for reads on this machine (ClientReads), which a server-indexed vault has none of"
)
def test_a_text_held_by_two_notes_names_both_through_the_owner_and_here(tmp_path):
    """One hit per text, listing every note that holds it: the owner's wire keeps the list."""
    root = make_vault(tmp_path)
    bullet = "- 09:00 The harbour crane lifted crates of copper on Tuesday. ^m-crane-{}\n"
    for day in ("01", "02"):
        (root / "daily" / f"2026-09-{day}.md").write_text(f"# 2026-09-{day}\n\n" + bullet.format(day))
    both = ("daily/2026-09-01.md#^m-crane-01", "daily/2026-09-02.md#^m-crane-02")
    with client_of_an_owner(tmp_path, vault=root) as (_, store):
        through_the_owner = store.recall("harbour crane copper")
        warm(store)
        answered_here = store.recall("harbour crane copper")
    for result in (through_the_owner, answered_here):
        assert [hit.sources for hit in result.hits] == [both]


@CLIENT_RANKS_HERE
def test_a_vault_with_a_reranker_keeps_every_recall_in_the_owner(tmp_path):
    """The second stage calls a model with the owner's credentials (its environment), so the owner
    answers `reads: owner` and ranks every recall itself."""
    from memvault.vault.config import default_config_data, render_config
    from memvault.vault.init import init_vault

    data = default_config_data(mode="journal", time_zone="Europe/Amsterdam")
    data["memory"]["rerank"] = {"provider": "http", "endpoint": "http://127.0.0.1:9/v1/rerank", "model": "m"}
    init_vault(tmp_path / "v", render_config(data))
    with client_of_an_owner(tmp_path, vault=tmp_path / "v") as (_, store):
        store.remember(FACTS[0])
        assert store.client.call("read_view", {"query": "x"}) == {"reads": "owner"}
        warm(store)
        found = store.recall("deployment color")
        assert store._reads is False and found.hits[0].text == FACTS[0]


@CLIENT_RANKS_HERE
def test_malformed_read_view_and_found_requests_are_refused_and_the_owner_keeps_serving(tmp_path):
    with client_of_an_owner(tmp_path) as (_, store):
        store.remember(FACTS[0])
        refused = [
            ("read_view", {}, "query must be text"),
            ("read_view", {"query": 7}, "query must be text"),
            ("read_view", {"query": "x", "since": True}, "since must be an integer"),
            ("read_view", {"query": "x", "since": -2}, "since must be an integer"),
            ("read_view", {"query": "x", "since": "9" * 5000}, "since must be an integer"),
            ("read_view", {"query": "x", "epoch": ["a"]}, "epoch must be text"),
            ("read_view", {"query": "x", "found": "daily/x.md#m-1"}, "found must be a list"),
            ("found", {"found": ["daily/x.md#m-1"] * 1001}, "at most 1000 sources"),
            ("found", {"found": [None]}, "each found source must be text"),
            ("found", {"found": ["x" * 5000]}, "at most 1024 characters"),
        ]
        for op, args, said in refused:
            with pytest.raises(InvalidRecord, match=said):
                store.client.call(op, args)
        assert store.client.call("found", {"found": ["daily/x.md#m-1"]}) == {"recorded": 1}
        warm(store)
        assert store.recall("deployment color").hits[0].text == FACTS[0]
        assert store._reads.answered == 1


@CLIENT_RANKS_HERE
def test_an_older_view_arriving_after_a_newer_one_leaves_no_row_unasked_for(tmp_path):
    """Two threads' views cross: the newer one (three pending rows) is taken first, the older
    (two) after it. The client then asks for what is past the rows it kept, so the next view
    brings the third row again instead of leaving it missing."""
    from memvault.indexer.maintenance.generations import current_generation

    root = make_vault(tmp_path, mode="journal")
    with MemoryStore.open(root, engine=False) as store:
        store.remember(FACTS[0])  # builds the index
    reads = ClientReads(VaultLayout(root), load_config(root, {}), client=None)
    generation = current_generation(VaultLayout(root).index_dir).name
    wire = [{"version": n, "id": f"m-{n:010x}", "path": "daily/2026-12-04.md", "kind": "curated",
             "day": "2026-12-04", "at": "2026-12-04T10:00:00+00:00", "text": f"Pending memory {n}.",
             "content_hash": f"{n:064x}", "heading": None, "explicit_id": True, "neighbours": []}
            for n in (1, 2, 3)]  # fmt: skip
    keys = [f"daily/2026-12-04.md#m-{n:010x}" for n in (1, 2, 3)]

    def view(held: int, since: int) -> dict:
        return {
            "generation": generation,
            "epoch": "e",
            "keys": keys[:held],
            "rows": [row for row in wire[:held] if row["version"] > since],
        }

    reads._take(view(3, -1))  # the newer view
    reads._take(view(2, -1))  # the older one, asked for at the same time, answered after
    _, rows = reads._take(view(3, reads._since))  # the next view: rows past what is held
    assert sorted(row.record.text for row in rows.values()) == [
        "Pending memory 1.",
        "Pending memory 2.",
        "Pending memory 3.",
    ]


@CLIENT_RANKS_HERE
def test_a_view_naming_a_generation_outside_the_index_folder_is_not_followed(tmp_path):
    """The client opens only a folder directly under the vault's index folder."""
    root = make_vault(tmp_path, mode="journal")
    reads = ClientReads(VaultLayout(root), load_config(root, {}), client=None)
    for generation in ("../../etc", "a/b", "..", "", None):
        view = {"generation": generation, "epoch": "e", "keys": [], "rows": []}
        with pytest.raises(ReadsThroughOwner):
            reads._take(view)
    malformed = {"generation": "g1", "epoch": "e", "keys": ["daily/x.md#m-1"], "rows": [{"id": "m-1"}]}
    with pytest.raises(ReadsThroughOwner, match="pending row could not be read"):
        reads._take(malformed)
    missing = {"generation": "g1", "epoch": "e", "keys": ["daily/x.md#m-1"], "rows": []}
    with pytest.raises(ReadsThroughOwner, match="missing"):
        reads._take(missing)
    assert json.dumps(reads._rows) == "{}"


FORKING = """
import json, os, signal, sys
from memvault import MemoryStore
store = MemoryStore.open(sys.argv[1])
store.remember("The lighthouse keeper logged a grey heron at dawn.")
store.recall("warm up", limit=1)
parents = [hit.text for hit in store.recall("which bird did the keeper log?").hits]  # ranked here
reader = store._reads._bm25
read_fd, write_fd = os.pipe()
child = os.fork()
if child == 0:
    signal.alarm(30)  # a child stuck on its parent's reader dies instead of hanging the test
    hits = [hit.text for hit in store.recall("which bird did the keeper log?").hits]
    os.write(write_fd, json.dumps({"hits": hits, "own_reader": store._reads._bm25 is not reader,
                                   "answered": store._reads.answered}).encode())
    os._exit(0)
os.close(write_fd)
_, status = os.waitpid(child, 0)
told = json.loads(os.read(read_fd, 1 << 16) or b"{}")
again = [hit.text for hit in store.recall("which bird did the keeper log?").hits]
print(json.dumps({"status": status, "parent": parents, "again": again, "child": told}))
store.close()
"""


@CLIENT_RANKS_HERE
def test_a_forked_client_ranks_with_a_reader_of_its_own_and_its_parent_goes_on(tmp_path):
    """A client that forks (a worker pool, a daemonizing host) has a Tantivy reader whose threads
    stayed in the parent: the child opens its own, finds what the parent found, and the parent's
    recalls go on as before."""
    with client_of_an_owner(tmp_path) as (root, _):
        done = subprocess.run([sys.executable, "-c", FORKING, str(root)], capture_output=True, text=True,
                              timeout=TIMEOUT, env=ENV, cwd=REPO)  # fmt: skip
        assert done.returncode == 0, done.stderr
        seen = json.loads(done.stdout)
    heron = "The lighthouse keeper logged a grey heron at dawn."
    assert seen["status"] == 0 and seen["parent"][:1] == seen["again"][:1] == [heron]
    assert seen["child"]["hits"][:1] == [heron] and seen["child"]["own_reader"] and seen["child"]["answered"] == 2
