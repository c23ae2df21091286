"""Runtime entries, the memories.json codec and the projections, as pure functions."""

import json

import pytest

from memvault.vault.errors import CredentialRefused, InvalidRecord
from memvault.vault.runtime.entries import (
    MAX_ENTRY_BYTES,
    CapacityExceeded,
    Keyed,
    RuntimeEntry,
    normalize_entry,
    pack,
    packed_bytes,
    retain_by_importance,
)
from memvault.vault.runtime.mutations import (
    AmbiguousMatch,
    NoMatch,
    apply,
    find_match,
    make_add,
    make_remove,
    make_replace,
)
from memvault.vault.runtime.projection import (
    CURRENT,
    EDITED,
    MISSING,
    STALE,
    classify,
    parse_edited,
    render_projection,
    sha256_hex,
)
from memvault.vault.runtime.state import ProjectionStamp, RuntimeState, decode_state, encode_state

T = "2026-01-01T00:00:00Z"


def entry(content, importance=3, target="MEMORY", updated=T):
    return RuntimeEntry(target, content, importance, T, updated)


# --- normalisation ---------------------------------------------------------------------------


def test_normalisation_is_nfkc_with_collapsed_whitespace():
    assert normalize_entry("  Prefers\tmetric\n units ") == "Prefers metric units"
    assert normalize_entry("ｆｕｌｌ width") == "full width"


@pytest.mark.parametrize("bad", ["", "   \n\t ", None, 42, "bell\x07", "nul\x00byte", "esc\x1b[31m"])
def test_normalisation_refuses_empty_non_text_and_control_characters(bad):
    with pytest.raises(InvalidRecord):
        normalize_entry(bad)


def test_normalisation_refuses_oversize_and_credentials():
    with pytest.raises(InvalidRecord, match="at most 4096"):
        normalize_entry("é" * (MAX_ENTRY_BYTES // 2 + 1))
    assert normalize_entry("x" * MAX_ENTRY_BYTES)  # exactly the limit is fine
    with pytest.raises(CredentialRefused):
        normalize_entry("the key is sk-proj-abcdefghijklmnopqrstuvwxyz0123456789ABCD")


# --- sizes and packing -----------------------------------------------------------------------


def test_packed_bytes_counts_utf8_bytes_and_one_separator_between_entries():
    assert packed_bytes([]) == 0
    assert packed_bytes(["abc"]) == 3
    assert packed_bytes(["abc", "é"]) == 3 + 1 + 2


def test_pack_is_deterministic_and_refuses_overflow():
    items = [Keyed(2, entry("b")), Keyed(0, entry("z")), Keyed(2, entry("a"))]
    assert [e.content for e in pack(items, 100)] == ["z", "a", "b"]
    assert pack(list(reversed(items)), 100) == pack(items, 100)
    with pytest.raises(CapacityExceeded):
        pack(items, 4)


def test_retention_keeps_important_entries_first_and_never_rewrites_them():
    candidates = [
        Keyed(0, entry("low " * 5, 1)),
        Keyed(1, entry("high " * 5, 5)),
        Keyed(2, entry("mid old " * 2, 3, updated="2026-01-01T00:00:00Z")),
        Keyed(3, entry("mid new " * 2, 3, updated="2026-02-01T00:00:00Z")),
    ]
    fixed = [Keyed(-1, entry("pending"))]
    budget = packed_bytes([fixed[0].entry.content, candidates[1].entry.content, candidates[3].entry.content])
    kept, left = retain_by_importance(candidates, fixed, budget)
    assert [k.key for k in kept] == [1, 3]
    assert [k.key for k in left] == [0, 2]
    assert all(k.entry is candidates[k.key].entry for k in kept)  # exact entries, same objects


# --- matching --------------------------------------------------------------------------------


def test_exact_match_wins_over_substring_and_duplicates_are_ambiguous():
    entries = [entry("Deploys on Tuesdays"), entry("Deploys on Tuesdays at noon")]
    assert find_match(entries, make_remove("MEMORY", "Deploys on Tuesdays")) == 0
    assert find_match(entries, make_remove("MEMORY", "noon")) == 1
    with pytest.raises(AmbiguousMatch):
        find_match(entries, make_remove("MEMORY", "Deploys"))
    with pytest.raises(NoMatch):
        find_match(entries, make_remove("MEMORY", "Fridays"))
    twins = [entry("same"), entry("same")]
    with pytest.raises(AmbiguousMatch, match="duplicate"):
        find_match(twins, make_remove("MEMORY", "same"))


def test_apply_reports_duplicate_and_unchanged_without_changes():
    entries = [entry("a"), entry("b")]
    assert apply(entries, make_add("MEMORY", "a"), None, T) == (entries, "duplicate")
    assert apply(entries, make_replace("MEMORY", "a", "a"), 0, T) == (entries, "unchanged")
    with pytest.raises(InvalidRecord, match="already reads"):
        apply(entries, make_replace("MEMORY", "a", "b"), 0, T)


def test_mutations_refuse_bad_targets_and_importance():
    with pytest.raises(InvalidRecord):
        make_add("NOTES", "x")
    for importance in (0, 6, True, 2.5, "3"):
        with pytest.raises(InvalidRecord):
            make_add("USER", "x", importance)
    with pytest.raises(InvalidRecord):
        make_remove("USER", "   ")


# --- memories.json ---------------------------------------------------------------------------


def test_state_round_trips_byte_identically():
    state = RuntimeState(3, (entry("u", 2, "USER"), entry("m")), {"USER": ProjectionStamp(1, "a" * 64)})
    raw = encode_state(state)
    assert decode_state(raw) == state
    assert encode_state(decode_state(raw)) == raw
    assert raw.endswith(b"\n") and b"\r" not in raw


def _valid():
    return json.loads(encode_state(RuntimeState(2, (entry("m"),), {"MEMORY": ProjectionStamp(2, "b" * 64)})))


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d.update(format="other"),
        lambda d: d.update(revision=-1),
        lambda d: d.update(revision=True),
        lambda d: d.update(entries={}),
        lambda d: d["entries"][0].update(target="NOTES"),
        lambda d: d["entries"][0].update(content="two\nlines"),
        lambda d: d["entries"][0].update(content=""),
        lambda d: d["entries"][0].update(importance=9),
        lambda d: d["entries"][0].update(created="yesterday"),
        lambda d: d["entries"][0].update(extra=1),
        lambda d: d["projections"].update(MEMORY={"revision": 7, "sha256": "b" * 64}),
        lambda d: d["projections"].update(NOTES={"revision": 1, "sha256": "b" * 64}),
    ],
)
def test_malformed_state_is_refused_with_the_fix(mutate):
    data = _valid()
    mutate(data)
    with pytest.raises(InvalidRecord, match="Fix: restore it from git"):
        decode_state(json.dumps(data).encode())


@pytest.mark.parametrize("raw", [b"", b"\xff\xfe", b"[]", b"{" * 100_000, b"x" * (9 * 1024 * 1024)])
def test_hostile_state_bytes_are_refused(raw):
    with pytest.raises(InvalidRecord):
        decode_state(raw)


# --- projections -----------------------------------------------------------------------------


def test_projection_is_deterministic_and_classified_current():
    data = render_projection("USER", [entry("Prefers metric units.", target="USER")], 4)
    assert data == render_projection("USER", [entry("Prefers metric units.", target="USER")], 4)
    assert data.decode().splitlines()[1:] == ["# User profile", "", "- Prefers metric units."]
    assert classify(data, "USER", sha256_hex(data), 4) == CURRENT
    assert classify(None, "USER", sha256_hex(data), 4) == MISSING


def test_projection_from_an_uncommitted_next_revision_is_stale_not_edited():
    next_bytes = render_projection("USER", [entry("new", target="USER")], 5)
    assert classify(next_bytes, "USER", "0" * 64, 4) == STALE
    # an older memvault file restored from git is the person's choice: an edit, not a leftover
    assert classify(render_projection("USER", [], 2), "USER", "0" * 64, 4) == EDITED
    tampered = next_bytes.replace(b"- new", b"- newer")
    assert classify(tampered, "USER", "0" * 64, 4) == EDITED
    assert classify(b"- hand written\n", "USER", "0" * 64, 4) == EDITED


def test_parse_edited_accepts_entries_headings_and_comments():
    raw = b"<!-- c -->\n# Profile\n\n- One\n* Two  \n+ Three\n\n"
    assert parse_edited(raw, "USER", 4096) == ["One", "Two", "Three"]
    windows = "\ufeff- One\r\n- - Two\r\n".encode()  # a BOM and CRLF from another editor
    assert parse_edited(windows, "USER", 4096) == ["One", "- Two"]


@pytest.mark.parametrize(
    "raw, problem",
    [
        (b"- ok\nA paragraph that is not an entry\n", "line 2 is not"),
        (b"- ok\n  - nested\n", "line 2 is not"),
        (b"- " + b"x" * 300 + b"\n", "over the 256-byte"),
        (b"\xff\xfe- bad utf8\n", "not UTF-8"),
        (b"- bell \x07\n", "control characters"),
    ],
)
def test_parse_edited_refuses_what_it_cannot_adopt(raw, problem):
    with pytest.raises(InvalidRecord, match=problem) as caught:
        parse_edited(raw, "USER", 256)
    assert "delete runtime/USER.md to restore it" in str(caught.value)
