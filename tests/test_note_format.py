"""Format v1: parse/render round trips, bullets, ids, frontmatter, fences and conflict hunks."""

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

import memvault.vault.note_blocks as note_blocks
import memvault.vault.note_reparse as note_reparse
from memvault.vault.ids import derived_id, memory_id, normalize_text
from memvault.vault.note import (
    append_line,
    bullet_region_left_open,
    format_bullet,
    new_note_text,
    parse,
    region_left_open,
    render,
)
from memvault.vault.plaintext import plain_text


def test_memvault_bullet_parses_time_text_and_id():
    note = parse("# 2026-11-30\n\n- 14:03 Morgan chose blue as the deployment color. ^m-1f3a9c0d2e\n")
    (bullet,) = note.bullets
    assert (bullet.time, bullet.text, bullet.id, bullet.has_explicit_id) == (
        "14:03",
        "Morgan chose blue as the deployment color.",
        "m-1f3a9c0d2e",
        True,
    )
    assert bullet.heading == "2026-11-30"


def test_hand_written_bullet_gets_a_derived_id_and_is_not_rewritten():
    text = "- call the dentist\n- call the dentist\n"
    note = parse(text)
    first, second = note.bullets
    assert first.id == derived_id("call the dentist", 0)
    assert second.id == derived_id("call the dentist", 1)
    assert first.id != second.id and not first.has_explicit_id
    assert render(note) == text


def test_duplicate_explicit_id_is_reported_and_the_second_gets_a_derived_id():
    note = parse("- one ^abc\n- two ^abc\n")
    assert [b.id for b in note.bullets] == ["abc", derived_id("two", 0)]
    assert note.duplicate_ids == ("abc",)


def test_frontmatter_is_read_but_kept_byte_for_byte():
    text = "---\ntags:\n  - a\ntimeZone: Asia/Tokyo\n---\n- fact\n"
    note = parse(text)
    assert note.frontmatter["timeZone"] == "Asia/Tokyo"
    assert note.body_start == 5
    assert render(note) == text
    assert [b.text for b in note.bullets] == ["fact"]


def test_unclosed_frontmatter_is_just_body():
    note = parse("---\n- a bullet\n")
    assert note.body_start == 0 and [b.text for b in note.bullets] == ["a bullet"]


def test_code_fences_hide_bullets():
    note = parse("```\n- not a bullet\n```\n~~~~\n- nor this\n~~~~\n- real\n")
    assert [b.text for b in note.bullets] == ["real"]


def test_conflict_hunks_are_reported_and_both_sides_stay_memories():
    # issue 44: a note git left in conflict keeps every memory of both sides searchable
    text = "- before\n<<<<<<< HEAD\n- ours\n=======\n- theirs\n>>>>>>> main\n- after\n"
    note = parse(text)
    assert note.conflicts == ((1, 6),)
    assert [b.text for b in note.bullets] == ["before", "ours", "theirs", "after"]
    assert note.hidden_lines == {1, 3, 5}
    assert render(note) == text


def test_unterminated_conflict_runs_to_end_of_file():
    note = parse("- keep\n<<<<<<< HEAD\n- kept in conflict\n")
    assert note.conflicts == ((1, 3),) and [b.text for b in note.bullets] == ["keep", "kept in conflict"]


def test_continuation_lines_and_nested_bullets():
    note = parse("- parent line\n  continues here ^pid\n  - child\n- sibling\n")
    parent, child, sibling = note.bullets
    assert parent.text == "parent line\ncontinues here" and parent.id == "pid"
    assert (note.starts[0], note.ends[0]) == (0, 2)
    assert child.indent == "  " and child.text == "child"
    assert sibling.text == "sibling"


def test_invalid_time_prefix_stays_in_text():
    (bullet,) = parse("- 25:99 not a time\n").bullets
    assert bullet.time is None and bullet.text == "25:99 not a time"


def test_ambiguous_time_with_offset_parses():
    (bullet,) = parse("- 01:30+01:00 second occurrence ^x\n").bullets
    assert bullet.time == "01:30+01:00"


def test_crlf_and_missing_final_newline_round_trip():
    text = "# day\r\n\r\n- one ^a\r\n- two"
    note = parse(text)
    assert render(note) == text
    assert [b.id for b in note.bullets] == ["a", derived_id("two", 0)]


def test_append_line_adds_missing_newline_only():
    note = parse("# day\n\n- person wrote this")
    updated = append_line(note, format_bullet("new fact", "m-0000000000", "10:00"))
    assert render(updated) == "# day\n\n- person wrote this\n- 10:00 new fact ^m-0000000000\n"


def test_memory_id_is_content_derived_and_normalised():
    assert memory_id("Morgan  chose\tblue ") == memory_id("Morgan chose blue")
    assert memory_id("morgan chose blue") != memory_id("Morgan chose blue")  # case-preserving
    assert memory_id("ｆｕｌｌwidth") == memory_id("fullwidth")  # NFKC
    assert normalize_text(" a \n b ") == "a b"


def test_plain_text_strips_markup_and_wikilinks():
    assert plain_text("[[Priya]] owns the *data migration* plan; see [[A/B#Plan|plan]].") == (
        "Priya owns the data migration plan; see plan."
    )
    assert plain_text("[ ] review the PR") == "[ ] review the PR"  # a task keeps its box (tests/test_tasks.py)
    assert plain_text("plain 09:14 color:blue") == "plain 09:14 color:blue"


# --- property tests ------------------------------------------------------------------------

_line_text = st.text(
    alphabet=st.characters(
        blacklist_categories=("Cs",), blacklist_characters="\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
    ),
    min_size=0,
    max_size=40,
)
_lines = st.lists(
    st.one_of(
        _line_text,
        _line_text.map(lambda t: "- " + t),
        _line_text.map(lambda t: "  * " + t),
        st.sampled_from(["---", "```", "~~~", "<<<<<<< HEAD", "=======", ">>>>>>> x", "# Heading", ""]),
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(_lines, st.sampled_from(["\n", "\r\n"]), st.booleans())
def test_any_text_round_trips_byte_identically(lines, newline, trailing):
    text = newline.join(lines) + (newline if trailing and lines else "")
    note = parse(text)
    assert render(note) == text
    ids = [b.id for b in note.bullets]
    assert len(ids) == len(set(ids)), "ids are unique within a note"


#: what Remember accepts: no empty text, and none that would leave a comment open behind it
#: (`prepare_fact` refuses "<!--" and friends: test_a_fact_that_would_open_a_comment_is_refused)
_fact = _line_text.map(normalize_text).filter(lambda t: t != "" and region_left_open(t) is None)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(_fact, min_size=1, max_size=10, unique_by=memory_id), st.sampled_from(["09:00", "23:59", "01:30+02:00"])
)
def test_notes_memvault_writes_parse_back_to_the_same_facts(facts, wall_time):
    text = new_note_text("2026-11-30")
    for fact in facts:
        text = render(append_line(parse(text), format_bullet(fact, memory_id(fact), wall_time)))
    note = parse(text)
    assert render(note) == text
    parsed = [(b.text, b.id, b.time) for b in note.bullets if b.has_explicit_id]
    # the "- HH:MM " prefix keeps any fact text (fences, conflict markers, ids) inside its bullet
    assert parsed == [(f, memory_id(f), wall_time) for f in facts]


@settings(max_examples=200, deadline=None)
@given(_lines)
def test_hand_written_bullets_keep_stable_ids_when_other_lines_change(lines):
    text = "\n".join(lines) + "\n"
    before = {b.id: b.text for b in parse(text).bullets}
    again = {b.id: b.text for b in parse(text + "\n# appended heading\n").bullets}
    assert all(again.get(key) == value for key, value in before.items() if key in again)
    assert set(before) <= set(again)


# --- issue 14: what a person sees, BOM, line endings, regions open at the end -------------------


def _memories(text: str) -> list[tuple[str, str]]:
    return [(memory.kind, memory.text) for memory in parse(text).bullets]


def test_comments_hide_what_they_cover_and_only_that():
    text = ("- seen before\n%% one-line comment %%\n%%\n- hidden in a block comment\n%%\n"
            "<!--\n- hidden in html\n-->\n- seen %% inline %% after\n")  # fmt: skip
    assert _memories(text) == [("bullet", "seen before"), ("bullet", "seen %% inline %% after")]
    assert parse(text).open_at_end is None


def test_prose_quotes_callouts_and_lazy_continuations_are_memories():
    text = ("# Day\n\nFirst paragraph\nstill the first.\n\n> [!warning]- Heads up\n> the build is red\n\n"
            "- a bullet\nlazily continued\n- next ^m-0123456789\n\n| a | table |\n---\n")  # fmt: skip
    assert _memories(text) == [
        ("paragraph", "First paragraph\nstill the first."),
        ("quote", "Heads up\nthe build is red"),
        ("bullet", "a bullet\nlazily continued"),
        ("bullet", "next"),
    ]
    assert [memory.heading for memory in parse(text).bullets] == ["Day"] * 4
    assert render(parse(text)) == text


def test_a_paragraph_may_carry_a_persons_block_id():
    [memory] = parse("A thought worth linking. ^my-thought\n").bullets
    assert (memory.kind, memory.text, memory.id) == ("paragraph", "A thought worth linking.", "my-thought")


def test_bom_before_frontmatter_is_tolerated_and_kept():
    text = "\ufeff---\ntimeZone: America/New_York\n---\n- 09:00 hello\n"
    note = parse(text)
    assert note.frontmatter == {"timeZone": "America/New_York"} and render(note) == text
    assert _memories(text) == [("bullet", "hello")]


def test_a_note_knows_its_line_ending_and_appends_with_it():
    note = parse("# Day\r\n\r\n- one")
    assert note.newline == "\r\n"
    grown = append_line(note, format_bullet("two", "m-0000000001", "10:00", note.newline))
    assert render(grown) == "# Day\r\n\r\n- one\r\n- 10:00 two ^m-0000000001\r\n"
    assert parse("- lf\n").newline == "\n" and parse("").newline == "\n"


def test_open_region_at_end_is_named_with_its_line():
    assert parse("- a\n```\ncode\n").open_at_end == "an unclosed code fence (``` on line 2)"
    assert parse("- a\n<<<<<<< HEAD\n- b\n").open_at_end == "an unterminated merge-conflict hunk (<<<<<<< on line 2)"
    assert parse("- a\n<!-- started\n").open_at_end == "an unclosed HTML comment (<!-- on line 2)"
    assert parse("- a\n%%\n").open_at_end == "an unclosed Obsidian comment (%% on line 2)"
    assert parse("- a\n```\ncode\n```\n<<<<<<< a\n=======\n>>>>>>> b\n").open_at_end is None


@pytest.mark.both_backends
@pytest.mark.parametrize("fact", ["<!--", "before <!-- after", "%% aside", "a <!-- b --> c <!--"])
def test_a_fact_that_would_open_a_comment_is_refused_and_nothing_is_written(tmp_path, fact):
    """ "<!--" parses as its own bullet but opens a comment that hides every later line of the
    note: Remember, capture's parser and the note writer each refuse it, naming the fix."""
    from memvault.indexer.engine.store import MemoryStore
    from memvault.vault.capture.fields import unsafe_text_problem
    from memvault.vault.config import default_config_data, render_config
    from memvault.vault.errors import InvalidRecord
    from memvault.vault.init import init_vault
    from memvault.vault.note_append import NewBullet, NoteNotWritable, append_bullets_once
    from tests.postgres_helpers import on_test_backend

    root = tmp_path / "v"
    init_vault(root, render_config(default_config_data(mode="lite", time_zone="UTC")))
    with MemoryStore.open(on_test_backend(root)) as store:
        with pytest.raises(InvalidRecord, match="would start an unclosed .* comment .*nothing was written"):
            store.remember(fact)
        kept = store.remember("a <!-- balanced --> comment stays a fact")
        assert store.recall("balanced comment").hits[0].id == kept.id
    assert "would start an unclosed" in unsafe_text_problem(fact, 500)
    layout = store.layout
    before = {p.name: p.read_bytes() for p in (root / "daily").glob("*.md")}
    with pytest.raises(NoteNotWritable, match="would leave an unclosed"):
        append_bullets_once(layout, "daily/2026-11-30.md", "2026-11-30", [NewBullet(fact, "m-0000000001", "09:00")])
    assert {p.name: p.read_bytes() for p in (root / "daily").glob("*.md")} == before
    assert region_left_open("a <!-- b --> c") is None and region_left_open("%% x %%") is None


@settings(max_examples=300, deadline=None)
@given(st.one_of(_line_text, st.text(alphabet="-%<!>`~ \n\r\u2028ab=", max_size=24)))
def test_the_open_region_shortcut_answers_as_the_parse_does(text):
    # region_left_open skips the parse for one line holding no comment opener: it must never differ
    assert region_left_open(text) == bullet_region_left_open(text)


# --- a note parsed from where an earlier parse of its first lines ended --------------------------

_NOTE_LINES = st.sampled_from(
    [
        "- 09:00 Morgan chose blue. ^m-00000000a1",
        "- 09:01 Morgan chose blue. ^m-00000000a1",
        "- an id-less fact",
        "- an id-less fact",
        "  deeper continuation",
        "lazy continuation",
        "",
        "# Heading",
        "## Other heading",
        "```",
        "~~~",
        "<!--",
        "-->",
        "%% hidden %%",
        "%%",
        "<<<<<<< HEAD",
        "=======",
        ">>>>>>> branch",
        "---",
        "title: x",
        "> a quote",
        "> [!note] a callout",
        "| a | table |",
        "* * *",
        "1. numbered item",
        "-",
        "   - nested item ^m-00000000b2",
        "\ufeff---",
        "a paragraph line",
        "see ^m-00000000c3 in prose",
        "--> text after a comment",
    ]
)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(_NOTE_LINES, min_size=1, max_size=14),
    st.lists(_NOTE_LINES, min_size=1, max_size=8),
    st.sampled_from(["\n", "\r\n"]),
    st.booleans(),
    st.sampled_from(["\n", "\r\n", "\r", "\u2028", "\x0c", "\x85"]),
)
def test_a_note_parsed_from_an_earlier_parse_of_its_first_lines_equals_a_whole_parse(
    head, more, newline, closed, breaks
):
    """Only the appended text is split into lines (whatever breaks it holds): with the earlier
    lines, they are the whole's lines, and the parse equals a whole parse."""
    import memvault.vault.note as note_module

    before = "".join(line + newline for line in head)
    after = before + breaks.join(more) + (newline if closed else "")
    note_module._cache = note_module._ParseCache(4, smallest=0)  # the extension starts from `before`'s parse
    _ = parse(before).by_block_id  # made on the earlier parse: the extension carries it on
    _ = parse(before).marked_ids
    extended = parse(after)
    whole = note_module._parse_lines(tuple(after.splitlines(keepends=True))).note
    assert extended == whole
    assert extended.by_block_id == whole.by_block_id
    assert extended.marked_ids == note_module.marked_ids(after)  # hidden copies of ids included


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(_NOTE_LINES, st.sampled_from(["\n", "\r\n", "\u2028", "\x0c", "\x85"])), min_size=1, max_size=10
    ),
    st.lists(st.lists(_NOTE_LINES, min_size=1, max_size=4), min_size=1, max_size=4),
)
def test_appends_to_a_note_holding_a_rare_line_break_parse_as_a_whole_parse_would(head, appends):
    """A note holding a rare line break anywhere (not only in what was appended last) is parsed
    whole: the flag is kept with each cached parse, and an append looks only at what it added."""
    import memvault.vault.note as note_module

    note_module._cache = note_module._ParseCache(4, smallest=0)
    text = "".join(line + brk for line, brk in head) + "\n"
    _ = parse(text).marked_ids  # made on the cached parse the appends extend
    for lines in appends:
        text += "".join(line + "\n" for line in lines)
        reparsed = parse(text)
        assert reparsed == note_module._parse_lines(tuple(text.splitlines(keepends=True))).note
        assert reparsed.marked_ids == note_module.marked_ids(text)


@settings(max_examples=600, deadline=None)
@given(
    st.lists(_NOTE_LINES, max_size=14),
    st.lists(st.lists(_NOTE_LINES, max_size=8), min_size=2, max_size=4),
    st.sampled_from(["\n", "\r\n"]),
)
def test_a_note_whose_last_lines_changed_parses_as_a_whole_parse_would(head, endings, newline):
    """An editor's save rewrites a note's last lines (a person's scratch line moves below the
    lines memvault appended): each version is parsed from the last memory shared with one parsed
    before it, and must equal a whole parse of it."""
    import memvault.vault.note as note_module

    note_module._cache = note_module._ParseCache(4, smallest=0)
    for ending in endings:
        text = "".join(line + newline for line in head + ending)
        reparsed = parse(text)
        whole = note_module._parse_lines(tuple(text.splitlines(keepends=True))).note
        assert reparsed == whole
        assert reparsed.by_block_id == whole.by_block_id  # carried on from the version before
        # carried on too: the marks of the lines left behind leave (unless a kept line repeats one)
        assert reparsed.marked_ids == note_module.marked_ids(text)


def _whole_parse(text: str):
    import memvault.vault.note as note_module

    return note_module._parse_lines(tuple(text.splitlines(keepends=True)))


def _assert_parsed_as_a_whole_parse_would(text: str, reparsed) -> None:
    """`reparsed` (parse(text), from an earlier parse) equals a whole parse of `text`, and so does the
    state a later version is parsed from (ids given, id-less texts counted, open regions)."""
    import memvault.vault.note as note_module

    whole = _whole_parse(text)
    assert reparsed == whole.note
    assert reparsed.by_block_id == whole.note.by_block_id
    assert reparsed.marked_ids == note_module.marked_ids(text)
    kept = next(parsed for cached, parsed, _ in note_module._cache._entries if cached == text)
    assert kept.region_open == whole.region_open
    assert (kept.tail.heading, kept.tail.seen, kept.tail.occurrences) == (
        whole.tail.heading,
        whole.tail.seen,
        whole.tail.occurrences,
    )


@settings(max_examples=800, deadline=None)
# a comment opened in the changed lines closes on the first line kept: it starts in a comment there
@example(["- an id-less fact", ""], [["<!--"], []], ["--> text after a comment"], "\n")
@given(
    st.lists(_NOTE_LINES, max_size=10),
    st.lists(st.lists(_NOTE_LINES, max_size=6), min_size=2, max_size=5),
    st.lists(_NOTE_LINES, min_size=1, max_size=10),
    st.sampled_from(["\n", "\r\n"]),
)
def test_a_note_whose_lines_changed_between_kept_ones_parses_as_a_whole_parse_would(head, middles, tail, newline):
    """A person adds, edits or drops lines above memories that stay: each version is parsed from
    one parsed before it, taking the memories below the change up again where they would parse
    the same (vault/note.py, `_reparse_between`), and must equal a whole parse of it, with the
    state a later version is parsed from (ids given, id-less texts counted, open regions)."""
    import memvault.vault.note as note_module

    note_module._cache = note_module._ParseCache(4, smallest=0)
    for version, middle in enumerate(middles):
        text = "".join(line + newline for line in head + middle + tail)
        reparsed = parse(text)
        if version == 0:
            _ = reparsed.by_block_id, reparsed.marked_ids  # made here, carried on to the versions after
        _assert_parsed_as_a_whole_parse_would(text, reparsed)


@settings(max_examples=500, deadline=None)
@given(
    st.lists(_NOTE_LINES, max_size=8),
    st.lists(st.tuples(st.lists(_NOTE_LINES, max_size=4), st.lists(_NOTE_LINES, max_size=4)), min_size=2, max_size=5),
    st.lists(_NOTE_LINES, min_size=1, max_size=8),
    st.sampled_from(["\n", "\r\n"]),
)
def test_an_editors_save_that_drops_lines_appended_since_it_read_parses_as_a_whole_parse_would(
    head, versions, tail, newline
):
    """An editor saves from a buffer read a moment ago: its lines changed near the top, and the
    lines memvault appended since then are gone from the end. Each version (parsed from the one
    before, with its last lines dropped first, `_shared_with`) must equal a whole parse."""
    import memvault.vault.note as note_module

    note_module._cache = note_module._ParseCache(4, smallest=0)
    for version, (middle, appended) in enumerate(versions):
        text = "".join(line + newline for line in head + middle + tail + appended)
        reparsed = parse(text)
        if version == 0:
            _ = reparsed.by_block_id, reparsed.marked_ids  # made here, carried on to the versions after
        _assert_parsed_as_a_whole_parse_would(text, reparsed)


def test_a_save_above_a_big_note_that_dropped_its_last_appends_parses_the_changed_lines_only(monkeypatch):
    """The editor read the note, memvault appended four lines, the person saved with a line added at
    the top (and without the four): the 20,000 memories below are taken up again, not parsed."""
    import memvault.vault.note as note_module

    note_module._cache = note_module._ParseCache(4)
    lines = "".join(f"- 10:00 agent fact {n} ^m-{n:010x}\n" for n in range(20_000))
    read = parse("# 2026-12-04\n\n" + lines)
    appended = ""
    for n in range(4):  # memvault's appends since the editor read push that version out of the cache
        appended += f"- 10:01 appended {n} ^m-a00000000{n}\n"
        parse("# 2026-12-04\n\n" + lines + appended)
    made = []
    make_bullet = note_blocks._make_bullet
    monkeypatch.setattr(note_blocks, "_make_bullet", lambda *args: made.append(args[1]) or make_bullet(*args))
    text = "# 2026-12-04\n\n- a line of the person's, at the top\n" + lines
    after = parse(text)
    assert len(made) < 10
    # all but the last, which the parse without the two lines read again, are the same objects
    assert all(now is then for now, then in zip(after.bullets[1:-1], read.bullets[:-1], strict=True))
    monkeypatch.setattr(note_blocks, "_make_bullet", make_bullet)
    assert after == _whole_parse(text).note


def test_a_line_added_above_a_big_notes_memories_parses_that_line_only(monkeypatch):
    """A person adds a line at the top of a day's note of 20,000 memories: the memories below it
    are taken up again, one line further down, not parsed again (that cost the owner 0.9 s)."""
    import memvault.vault.note as note_module

    note_module._cache = note_module._ParseCache(4)
    lines = [f"- 10:00 agent fact {n} ^m-{n:010x}\n" for n in range(20_000)]
    before = parse("# 2026-12-04\n\n" + "".join(lines))
    made = []
    make_bullet = note_blocks._make_bullet
    monkeypatch.setattr(note_blocks, "_make_bullet", lambda *args: made.append(args[1]) or make_bullet(*args))
    text = "# 2026-12-04\n\n- a line of the person's, at the top\n" + "".join(lines)
    after = parse(text)
    assert len(made) < 10
    assert after.starts[1] == before.starts[0] + 1 and after.bullets[1].id == "m-0000000000"
    # the memories below are the earlier parse's own objects: nothing made of them is made again
    assert all(now is then for now, then in zip(after.bullets[1:], before.bullets, strict=True))
    monkeypatch.setattr(note_blocks, "_make_bullet", make_bullet)
    assert after == _whole_parse(text).note


def test_a_save_of_a_big_notes_last_lines_looks_for_marks_in_those_lines_only(monkeypatch):
    """The repair after a person's save asks which of memvault's lines the save dropped: the
    marks of a day's note of 20,000 lines are carried on from its version before the save, and
    only the lines the save changed are scanned (a whole scan cost the owner 5 ms a save)."""
    import memvault.vault.note as note_module

    note_module._cache = note_module._ParseCache(4)
    lines = [f"- 10:00 agent fact {n} ^m-{n:010x}\n" for n in range(20_000)]
    before = "# 2026-12-04\n" + "".join(lines) + "- 10:01 person scratch 1\n"
    assert "m-0000000005" in parse(before).marked_ids
    pattern, scanned = note_reparse._ID_MARK_RE, []

    class Counting:
        def findall(self, text):
            scanned.append(len(text))
            return pattern.findall(text)

    monkeypatch.setattr(note_reparse, "_ID_MARK_RE", Counting())  # what the reparse scans
    # the save dropped the last two memvault lines and moved the person's line (their buffer was older)
    after = "# 2026-12-04\n" + "".join(lines[:-2]) + "- 10:02 person scratch 2 ^p-scratch\n"
    marks = parse(after).marked_ids
    assert f"m-{19_999:010x}" not in marks and f"m-{19_998:010x}" not in marks
    assert f"m-{19_997:010x}" in marks and "m-0000000000" in marks and "p-scratch" in marks
    assert sum(scanned) < len(after) / 100
    monkeypatch.setattr(note_reparse, "_ID_MARK_RE", pattern)
    assert marks == note_module.marked_ids(after)


@settings(max_examples=300, deadline=None)
@given(st.lists(_NOTE_LINES, max_size=14), st.lists(st.lists(_NOTE_LINES, max_size=8), min_size=2, max_size=4))
def test_records_of_a_note_saved_again_at_its_end_equal_records_made_afresh(head, endings):
    """records_from_note reuses the records of the bullets two versions share (vault/records.py):
    each version's records equal those made with nothing remembered."""
    from datetime import date

    import memvault.vault.note as note_module
    import memvault.vault.records as records_module

    note_module._cache = note_module._ParseCache(4, smallest=0)  # these notes are small
    for ending in endings:
        text = "".join(line + "\n" for line in head + ending)
        made = records_module.records_from_note("daily/2026-11-30.md", "daily", date(2026, 11, 30), parse(text), "UTC")
        records_module._made.clear()
        fresh = records_module.records_from_note("daily/2026-11-30.md", "daily", date(2026, 11, 30), parse(text), "UTC")
        assert made == fresh
        records_module._made.clear()
        records_module.records_from_note("daily/2026-11-30.md", "daily", date(2026, 11, 30), parse(text), "UTC")


@settings(max_examples=400, deadline=None)
# a changed line between memories that stay where they were: every memory equals the one before
@example(["- an id-less fact"], [[""], ["%% hidden %%"]], ["a paragraph line"], [], set())
@given(
    st.lists(_NOTE_LINES, max_size=10),
    st.lists(st.lists(_NOTE_LINES, max_size=6), min_size=2, max_size=4),
    st.lists(_NOTE_LINES, min_size=1, max_size=10),
    st.lists(st.lists(_NOTE_LINES, max_size=3), max_size=3),
    st.sets(st.integers(1, 3)),
)
def test_records_of_a_note_whose_lines_changed_between_kept_ones_equal_records_made_afresh(
    head, middles, tail, appends, unread
):
    """The records of memories taken up again below a change are moved with them (vault/records.py):
    each version's records equal those made with nothing remembered, lines and neighbours included.
    Before each version, lines may have been appended to the one before (parsed, no records made),
    and of some versions no records are made at all (the next is made from an older one's)."""
    from datetime import date

    import memvault.vault.note as note_module
    import memvault.vault.records as records_module

    note_module._cache = note_module._ParseCache(4, smallest=0)
    records_module._made.clear()
    for version, middle in enumerate(middles):
        if version and version <= len(appends):
            tail = tail + appends[version - 1]
            parse("".join(line + "\n" for line in head + middles[version - 1] + tail))
        text = "".join(line + "\n" for line in head + middle + tail)
        if version in unread:
            parse(text)  # parsed (by a writer), no records made of this version
            continue
        made = records_module.records_from_note("daily/2026-11-30.md", "daily", date(2026, 11, 30), parse(text), "UTC")
        records_module._made.clear()
        fresh = records_module.records_from_note("daily/2026-11-30.md", "daily", date(2026, 11, 30),
                                                 _whole_parse(text).note, "UTC")  # fmt: skip
        assert made == fresh
        records_module._made.clear()  # the next version's records are made from this one's
        records_module.records_from_note("daily/2026-11-30.md", "daily", date(2026, 11, 30), parse(text), "UTC")


def test_the_records_of_memories_below_a_line_added_at_the_top_are_moved_not_made(monkeypatch):
    """A line added above a day's 20,000 memories: their records are the ones made before (they
    hold no line; making them again cost 0.2 s, under the vault lock for the first writer after)."""
    from datetime import date

    import memvault.vault.note as note_module
    import memvault.vault.records as records_module

    note_module._cache = note_module._ParseCache(4)
    lines = "".join(f"- 10:00 agent fact {n} ^m-{n:010x}\n" for n in range(20_000))
    day = date(2026, 12, 4)
    before = records_module.records_from_note("daily/2026-12-04.md", "daily", day, parse("# t\n\n" + lines), "UTC")
    # an agent appends two lines (parsed, no records made of that version), then the person saves
    lines += "- 10:01 appended one ^m-a000000001\n- 10:01 appended two ^m-a000000002\n"
    parse("# t\n\n" + lines)
    made = []
    instant = records_module.bullet_instant
    monkeypatch.setattr(records_module, "bullet_instant", lambda *args: made.append(args) or instant(*args))
    text = "# t\n\n- the person's line\n" + lines
    after = records_module.records_from_note("daily/2026-12-04.md", "daily", day, parse(text), "UTC")
    after_text = text
    assert len(made) <= 1 + 2 * records_module.CONTEXT_NEIGHBOURS + 2
    assert after[1 + records_module.CONTEXT_NEIGHBOURS : 10] == before[records_module.CONTEXT_NEIGHBOURS : 9]
    # the person saves twice more, a line above each time, and an agent appends between: no
    # records are made of the versions between (a writer parsed them), only of the last
    text = "# t\n\n- the person's second line\n" + text.removeprefix("# t\n\n")
    parse(text)
    text += "- 10:02 three ^m-a000000003\n"
    parse(text)
    text = "# t\n\n- the person's third line\n" + text.removeprefix("# t\n\n")
    made.clear()
    latest = records_module.records_from_note("daily/2026-12-04.md", "daily", day, parse(text), "UTC")
    assert len(made) <= 3 + 2 * records_module.CONTEXT_NEIGHBOURS + 1
    assert latest[3 + records_module.CONTEXT_NEIGHBOURS : 12] == after[1 + records_module.CONTEXT_NEIGHBOURS : 10]
    monkeypatch.setattr(records_module, "bullet_instant", instant)
    for made_then, its_text in ((after, after_text), (latest, text)):
        records_module._made.clear()
        assert made_then == records_module.records_from_note("daily/2026-12-04.md", "daily", day,
                                                             _whole_parse(its_text).note, "UTC")  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(
    st.lists(_NOTE_LINES, max_size=14),
    st.lists(
        st.sampled_from(
            ["plain fact", "opens <!-- here", "closes --> here", "%% both %%", "opens %% here", "a `tick`"]
        ),
        min_size=1,
        max_size=4,
    ),
    st.booleans(),
)
def test_lines_appended_to_a_note_ending_in_the_open_leave_it_as_they_leave_themselves(head, facts, last_newline):
    """refuse_opening_a_region parses an append's lines alone when the note ends outside every
    fence, comment and conflict hunk: what they leave open must be what the whole would."""
    from memvault.vault.note_append import NewBullet, _payload

    text = "\n".join(head) + ("\n" if last_newline and head else "")
    note = parse(text)
    assume(note.open_at_end is None)
    payload = _payload(note, [NewBullet(fact, f"m-{n:010d}", "09:00") for n, fact in enumerate(facts)]).decode()
    assert (parse(text + payload).open_at_end is None) == (parse(payload).open_at_end is None)


def test_a_day_note_of_megabytes_is_parsed_from_its_last_version():
    """A busy day's note passes a mebibyte (agents appending all day): each read of it, a few per
    append, must not parse its thousands of lines whole (it did above 1 MiB). The cache keeps a
    few such versions at most, bounded by their size in all."""
    import memvault.vault.note as note_module

    note_module._cache = note_module._ParseCache(8)
    line = "- 10:00 Agent 3 noted the harbour master's new schedule for the eastern pier ^m-{:010x}\n"
    text = "# 2026-12-04\n" + "".join(line.format(n) for n in range(30_000))
    assert len(text) > 2 << 20
    first = parse(text)
    assert parse(text[:-1] + text[-1]) is first  # an equal text read again (a new string): the same parse
    grown = text + line.format(30_000)
    assert parse(grown).bullets[0] is first.bullets[0]  # parsed from the last version: its memories kept
    assert parse(grown).bullets[-1].block_id == f"m-{30_000:010x}"
    for n in range(12):  # versions enough to pass the total bound
        grown += line.format(40_000 + n)
        parse(grown)
    cached = sum(len(known[0]) for known in note_module._cache._entries)
    assert cached <= note_reparse._PARSE_CACHE_TOTAL_CHARS and len(note_module._cache._entries) >= 2


def _parsed_plain(text: str) -> str:
    """The plain text as the inline parser gives it, with no fast path."""
    from memvault.vault import plaintext

    pieces: list[str] = []
    for token in plaintext._parser()(plaintext._WIKILINK_RE.sub(lambda m: (m.group(2) or m.group(1)).strip(), text)):
        plaintext._collect(token, pieces)
        pieces.append(" ")
    return plaintext._WHITESPACE_RE.sub(" ", "".join(pieces)).strip()


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab1 !&;#x[]*_", min_size=0, max_size=30))
def test_plain_text_skips_the_parser_only_where_the_parser_changes_nothing(text):
    """Lines with "!" or "&" but no markup (most dialogue) skip mistune (issue 43): the result is
    the parser's, whatever the mix of "!", "&", entities, brackets and emphasis."""
    from memvault.vault.plaintext import _plain

    assume(not text.strip().startswith("#"))  # a heading line: the block parser's, not this fast path's
    assert _plain(text.strip()) == _parsed_plain(text.strip())


def test_images_still_go_through_the_parser():
    from memvault.vault.plaintext import plain_text

    assert plain_text("Wow! ![a cat](cat.png) & more") == "Wow! a cat & more"
    assert plain_text("Tom &amp; Jerry!") == "Tom &amp; Jerry!"  # as the parser keeps it
