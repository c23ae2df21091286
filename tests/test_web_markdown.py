"""Vault markdown → HTML for the web pages: hostile text stays text, every bullet gets its anchor."""

import re
from html.parser import HTMLParser

import pytest

from memvault.cli.web.markdown import render_markdown, render_note, safe_href, source_url
from memvault.vault.note import parse

# Markdown rendering is a pure function of the text: no vault, no index, so these tests stay local.
XSS_CORPUS = [
    "<script>alert(1)</script>",
    '<img src=x onerror="alert(2)">',
    "<svg onload=alert(3)>",
    '<a href="javascript:alert(4)">x</a>',
    "[click me](javascript:alert(5))",
    "[click me](JaVaScRiPt:alert(6))",
    "[data](data:text/html;base64,PHNjcmlwdD5hbGVydCg3KTwvc2NyaXB0Pg==)",
    "[vb](vbscript:msgbox(8))",
    "![pixel](javascript:alert(9))",
    "<javascript:alert(10)>",
    '[t](https://example.com "x\\" onmouseover=\\"alert(11)")',
    "<iframe src=//evil.example></iframe>",
    '[[2026-11-30"><script>alert(12)</script>]]',
    "<style>body{display:none}</style>",
    "[x](//evil.example/path)",
    "[x]( javascript:alert(13))",
    "[x](&#106;avascript:alert(14))",
]


class _Tags(HTMLParser):
    """Every element and attribute a browser would build from the HTML (text stays text)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def _is_inert(html: str) -> None:
    parser = _Tags()
    parser.feed(html)
    for tag, attrs in parser.tags:
        assert tag not in ("script", "iframe", "svg", "img", "style", "object", "embed", "form", "base"), html
        assert not [name for name in attrs if name.startswith("on")], html
        for name in ("href", "src", "action"):
            value = (attrs.get(name) or "").strip()
            assert not re.match(r"(javascript|vbscript|data):", value, re.I) and not value.startswith("//"), html


@pytest.mark.parametrize("text", XSS_CORPUS)
def test_hostile_markdown_renders_inert(text):
    _is_inert(render_markdown(text))
    html, _ = render_note(f"# 2026-11-30\n\n- 09:00 {text} ^m-0123456789\n\n{text}\n")
    _is_inert(html)


def test_script_text_is_shown_as_text():
    html = render_markdown("<script>alert(1)</script>")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_a_removed_link_target_is_shown_beside_its_label():
    html = render_markdown("[click me](javascript:alert(5))")
    assert "click me" in html and "unsafe-link" in html and "<a " not in html


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://example.com/x", "https://example.com/x"),
        ("http://example.com", "http://example.com"),
        ("mailto:sam@example.com", "mailto:sam@example.com"),
        ("#m-0123456789", "#m-0123456789"),
        ("/notes/daily/2026-11-30", "/notes/daily/2026-11-30"),
        ("javascript:alert(1)", None),
        ("JAVASCRIPT:alert(1)", None),
        (" javascript:alert(1)", None),
        ("java\tscript:alert(1)", None),
        ("data:text/html,x", None),
        ("file:///etc/passwd", None),
        ("//evil.example/", None),
        ("https:evil", None),
        ("\\\\evil\\share", None),
        ("", None),
    ],
)
def test_safe_href(url, expected):
    assert safe_href(url) == expected


def test_external_links_carry_noopener():
    html = render_markdown("[status](https://status.example.com)")
    assert 'href="https://status.example.com"' in html and 'rel="noopener noreferrer nofollow"' in html


def test_every_bullet_gets_the_id_its_index_row_has(fixture_vault):
    text = (fixture_vault / "daily" / "2026-11-02.md").read_text()
    html, note = render_note(text)
    # list items only: the note's prose and callout are memories too (issue 14) but are not <li>s
    ids = [bullet.id for bullet in parse(text).bullets if bullet.kind == "bullet"]
    assert len(ids) == 4  # the fixture's Obsidian note: one memvault bullet and three hand-written ones
    for block_id in ids:
        assert html.count(f'<li id="{block_id}"') == 1
    assert [b.id for b in note.bullets if b.kind == "bullet"] == ids


def test_derived_and_explicit_ids_are_both_anchored():
    text = "# 2026-11-30\n\n- 14:03 Morgan chose blue. ^m-1f3a9c0d2e\n- written by hand\n"
    html, note = render_note(text)
    assert '<li id="m-1f3a9c0d2e"' in html
    derived = note.bullets[1].id
    assert derived.startswith("d-") and f'<li id="{derived}"' in html
    assert "^m-1f3a9c0d2e" not in html  # the block id is the anchor, not part of the text shown


def test_conflict_hunks_are_shown_verbatim_and_not_as_bullets(fixture_vault):
    html, note = render_note((fixture_vault / "daily" / "2026-11-05.md").read_text())
    assert '<pre class="conflict"' in html
    assert "&lt;&lt;&lt;&lt;&lt;&lt;&lt; HEAD" in html
    # both sides are memories (issue 44), shown inside the verbatim hunk rather than as bullets
    assert "Tuesday evening" in html and html.count('class="bullet ') == 2 and len(note.bullets) == 4


def test_fenced_code_is_not_bullets(fixture_vault):
    html, _ = render_note((fixture_vault / "daily" / "2026-11-02.md").read_text())
    assert "not_a_bullet = True" in html
    assert re.search(r'<li id="[^"]*"[^>]*>[^<]*not_a_bullet', html) is None


def test_wikilinks_to_notes_become_content_links():
    html = render_markdown("see [[2026-11-30#^m-1f3a9c0d2e|the decision]] and [[daily/2026-11-29]] and [[Morgan]]")
    assert 'href="/notes/daily/2026-11-30#m-1f3a9c0d2e">the decision</a>' in html
    assert 'href="/notes/daily/2026-11-29">daily/2026-11-29</a>' in html
    assert '<span class="wikilink">Morgan</span>' in html


def test_nested_bullets_keep_their_depth():
    html, _ = render_note("- parent\n  - child\n    - grandchild\n")
    assert "depth-0" in html and "depth-1" in html and "depth-2" in html


def test_source_url_points_at_the_bullet():
    assert source_url("daily/2026-11-30.md#^m-1f3a9c0d2e") == "/notes/daily/2026-11-30#m-1f3a9c0d2e"
    assert source_url("audit/2026-11-05.md#^a-observe01") == "/notes/audit/2026-11-05#a-observe01"


# --- a note as Obsidian's reading view shows it ------------------------------------------------------


def test_comments_are_hidden_as_obsidian_hides_them():
    text = ("# 2026-11-30\n\nIntro %% aside %% prose.\n%% a comment\nover two lines %%\n<!-- an html comment -->\n\n"
            "- 09:00 Shown %% not this %% and this ^m-0123456789\n- opens <!-- hidden\nstill hidden -->\n\n"
            "```\n%% inside code stays %%\n```\n")  # fmt: skip
    html, note = render_note(text)
    for hidden in ("aside", "a comment", "over two lines", "an html comment", "not this", "hidden", "%%", "&lt;!--"):
        assert hidden not in html.replace("%% inside code stays %%", ""), hidden
    assert "Intro  prose." in html and "Shown  and this" in html and "opens" in html
    assert "%% inside code stays %%" in html  # code is shown as written
    assert '<li id="m-0123456789"' in html


def test_tasks_are_disabled_checkboxes():
    html, note = render_note(
        "- [ ] Ask Alice ^m-0000000001\n- [x] Book the room\n- [X] Pay the deposit\n- not a task [ ]\n"
    )
    tasks = re.findall(
        r'<li id="([^"]+)" class="bullet depth-0 task( done)?"[^>]*>'
        r'<input type="checkbox" class="task-box" disabled( checked)?',
        html,
    )
    assert [(t[1], t[2]) for t in tasks] == [("", ""), (" done", " checked"), (" done", " checked")]
    assert tasks[0][0] == "m-0000000001"
    assert "[ ]" not in html.replace("not a task [ ]", "") and "[x]" not in html and "[X]" not in html
    assert "not a task [ ]" in html


def test_callouts_are_boxes_with_their_title():
    text = ("> [!warning] Careful **now**\n> The *body* line. ^m-callout001\n\n"
            "> [!tip]- Folded\n> hidden until opened\n\n"
            "> [!NOTE]\n> no title\n\n> a plain quote\n")  # fmt: skip
    html, _ = render_note(text)
    assert re.search(
        r'<div id="m-callout001" class="callout callout-warning memory">'
        r'<p class="callout-title">Careful <strong>now</strong>',
        html,
    )
    assert "<em>body</em>" in html and "[!warning]" not in html and "^m-callout001" not in html
    assert re.search(
        r'<details id="[^"]+" class="callout callout-tip memory"><summary class="callout-title">Folded', html
    )
    assert '<p class="callout-title">Note ' in html  # no title: the type is the title, as in Obsidian
    assert re.search(r'<blockquote id="[^"]+" class="memory"><p>a plain quote</p>', html)
    _is_inert(render_note('> [!x" onclick="alert(1)] <script>t</script>\n> body\n')[0])


def test_nested_wikilinks_lead_to_the_note():
    html = render_markdown(
        "[[2026/11/2026-11-30#^m-1f3a9c0d2e|that]] [[daily/2026/11/2026-11-30.md]] [[daily/2026/12/2026-11-30]]"
    )
    assert 'href="/notes/daily/2026/11/2026-11-30#m-1f3a9c0d2e">that</a>' in html
    assert 'href="/notes/daily/2026/11/2026-11-30">daily/2026/11/2026-11-30.md</a>' in html
    assert '<span class="wikilink">daily/2026/12/2026-11-30</span>' in html  # filed under the wrong month: not a note


def test_highlights_are_marked_as_in_obsidian():
    html, _ = render_note("- Ship ==only after== the smoke tests ^m-0000000002\n")
    assert "Ship <mark>only after</mark> the smoke tests" in html
