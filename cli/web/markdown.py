"""Vault markdown to safe HTML, with an anchor on every bullet so a hit's link lands on it.

Every byte of a note is untrusted. mistune renders with `escape=True` (raw HTML becomes text);
links keep only http(s), mailto and in-page targets (anything else, `javascript:` and `data:`
included, is rendered as plain text); images are never loaded (they become a link to their
target, and the page's Content-Security-Policy would refuse a foreign image anyway). Obsidian
wikilinks to notes (`[[2026-11-30#^m-1f3a9c0d2e|label]]`) become links into the Content page.

mistune has no source positions, so the note's structure comes from `memvault.vault.note.parse`
(the parser the index uses): each memory is rendered on its own with the id its index row
carries (`<li id=…>` for a list item, a `<p>`, a `<blockquote>` or a callout box for the
others), and the lines between them are rendered as markdown blocks. What Obsidian's reading
view hides (comments) is not shown; what it draws (tasks, callouts) is drawn, without script.
"""

from __future__ import annotations

import re
from html import escape
from urllib.parse import quote, urlsplit

import mistune
from mistune.renderers.html import HTMLRenderer

from memvault.vault.ids import BLOCK_ID_PATTERN
from memvault.vault.layout import DAILY, NOTE_KINDS, parse_note_relpath

# the note parser's own comment and fence rules, so the page hides exactly what the index skips
from memvault.vault.note import _COMMENT_CLOSE, Note, _track_fence, parse

_SAFE_SCHEMES = ("http", "https", "mailto")
_WIKILINK_RE = r"\[\[(?P<wl_target>[^\[\]|\n]{1,200})(?:\|(?P<wl_label>[^\[\]\n]{1,200}))?\]\]"
_BLOCK_ID_RE = re.compile(BLOCK_ID_PATTERN)
_QUOTE_PREFIX_RE = re.compile(r" {0,3}>[ \t]?")
_CALLOUT_RE = re.compile(r"\[!(?P<type>[^\]]*)\](?P<fold>[+-]?)[ \t]*(?P<title>.*)", re.DOTALL)
_TASK_RE = re.compile(r"\[(?P<mark>[ xX])\](?:[ \t]+(?P<text>.*))?", re.DOTALL)
_TRAILING_BLOCK_ID_RE = re.compile(rf"[ \t]+\^{BLOCK_ID_PATTERN}[ \t]*$")
_MAX_DEPTH = 4


def note_url(relpath: str, block_id: str | None = None, *, prefix: str = "/notes") -> str:
    """`daily/2026-11-30.md` (+ id) → `/notes/daily/2026-11-30#m-…` (the Content page's note view).

    The URL is the note's own name without `.md`, in whichever layout it is filed
    (`/notes/daily/2026/11/2026-11-30`); the note view also finds a note from its flat name."""
    return f"{prefix}/{quote(relpath.removesuffix('.md'))}" + (f"#{quote(block_id)}" if block_id else "")


def source_url(source: str) -> str:
    """A hit's source (`daily/2026-11-30.md#^m-…`) → the link to its bullet."""
    path, _, block = source.partition("#")
    return note_url(path, block.lstrip("^") or None)


def wikilink_note(target: str) -> tuple[str, str | None] | None:
    """An Obsidian link target naming a note (`2026-11-30#^m-…`, `daily/2026-11-29`,
    `2026/11/2026-11-30`, `audit/2026-11-05.md`) → (its relpath, block id or None); None otherwise."""
    path, _, anchor = target.strip().partition("#")
    path = path.strip().removesuffix(".md")
    relpath = f"{path}.md" if path.split("/", 1)[0] in NOTE_KINDS else f"{DAILY}/{path}.md"
    if parse_note_relpath(relpath) is None:  # the layout (vault/layout.py) says what a note is called
        return None
    block = anchor.strip().lstrip("^")
    return relpath, block if _BLOCK_ID_RE.fullmatch(block) else None


def safe_href(url: str) -> str | None:
    """The link target if it is harmless (http(s), mailto, in-page or relative path), else None."""
    url = url.strip()
    if not url or any(ord(ch) < 0x20 or ch in "\\" for ch in url):
        return None
    if url.startswith("#"):
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme:
        return (
            url
            if parts.scheme.lower() in _SAFE_SCHEMES and (parts.netloc or parts.scheme.lower() == "mailto")
            else None
        )
    if url.startswith("//"):  # protocol-relative: another host
        return None
    return None if ":" in url.split("/", 1)[0] else url


class _SafeRenderer(HTMLRenderer):
    def __init__(self) -> None:
        super().__init__(escape=True)

    def link(self, text: str, url: str, title: str | None = None) -> str:
        href = safe_href(url)
        if href is None:  # the label stays; the hostile target is shown inert beside it
            return f'{text} <span class="unsafe-link" title="link target removed">[{escape(url[:200])}]</span>'
        external = href.startswith(("http:", "https:", "mailto:"))
        rel = ' rel="noopener noreferrer nofollow"' if external else ""
        title_attr = f' title="{escape(title)}"' if title else ""
        return f'<a href="{escape(href)}"{title_attr}{rel}>{text}</a>'

    def image(self, text: str, url: str, title: str | None = None) -> str:
        return self.link(f"image: {text}" if text else "image", url, title)

    def wikilink(self, target: str, label: str | None) -> str:
        shown = escape(label or target)
        found = wikilink_note(target)
        if found is None:
            return f'<span class="wikilink">{shown}</span>'
        return f'<a class="wikilink" href="{escape(note_url(*found))}">{shown}</a>'

    def block_html(self, html: str) -> str:  # never reached with escape=True; kept inert if it is
        return f"<p>{escape(html)}</p>\n"

    def inline_html(self, html: str) -> str:
        return escape(html)


def _parse_wikilink(inline, match, state):
    state.append_token(
        {"type": "wikilink", "attrs": {"target": match.group("wl_target"), "label": match.group("wl_label")}}
    )
    return match.end()


def _wikilinks(md) -> None:
    md.inline.register("wikilink", _WIKILINK_RE, _parse_wikilink, before="link")
    if md.renderer and md.renderer.NAME == "html":
        md.renderer.register("wikilink", lambda renderer, target, label=None: renderer.wikilink(target, label))


def _markdown():
    return mistune.create_markdown(
        renderer=_SafeRenderer(), escape=True, plugins=["strikethrough", "mark", "table", "task_lists", _wikilinks]
    )


_MD = _markdown()


def render_markdown(text: str) -> str:
    """Any markdown (a document body, index.md) as safe HTML."""
    return _MD(text)


def render_inline(text: str) -> str:
    """One bullet's text as safe inline HTML (its paragraph wrapper dropped)."""
    html = _MD(text).strip()
    if html.startswith("<p>") and html.endswith("</p>") and html.count("<p>") == 1:
        return html[3:-4]
    return html


def render_note(text: str) -> tuple[str, Note]:
    """A note as Obsidian's reading view shows it, as safe HTML with an anchor (`id=`) on every
    memory, and the parsed note. Comments (`%% … %%`, `<!-- … -->`) are not shown; tasks are
    disabled checkboxes; callouts are boxes; merge-conflict hunks are shown verbatim."""
    note = parse(text)
    shown, comment_before = _visible_lines(note)
    out: list[str] = []
    if note.frontmatter:
        rows = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in note.frontmatter.items())
        out.append(f'<table class="frontmatter">{rows}</table>')
    conflict_at = {first: end for first, end in note.conflicts}
    bullet_at = {start: (bullet, end) for bullet, start, end in zip(note.bullets, note.starts, note.ends, strict=True)}
    chunk: list[str] = []
    bullets: list[str] = []
    index = note.body_start

    def flush_chunk() -> None:
        if "".join(chunk).strip():
            out.append(_MD("".join(chunk)))
        chunk.clear()

    def flush_bullets() -> None:
        if bullets:
            out.append('<ul class="bullets">' + "".join(bullets) + "</ul>")
            bullets.clear()

    while index < len(note.lines):
        if index in conflict_at:
            flush_chunk()
            flush_bullets()
            end = conflict_at[index]
            out.append('<pre class="conflict" title="merge-conflict markers: not indexed">'
                       + escape("".join(note.lines[index:end])) + "</pre>")  # fmt: skip
            index = end
        elif index in bullet_at:
            bullet, end = bullet_at[index]
            flush_chunk()
            if bullet.kind == "bullet":
                bullets.append(_bullet_html(bullet, comment_before[index]))
            else:  # a paragraph or a quote/callout is a memory too, drawn as what it is
                flush_bullets()
                out.append(_block_html(bullet, shown[index:end], comment_before[index]))
            index = end
        else:
            if note.lines[index].strip():
                flush_bullets()
            if shown[index] is not None:
                chunk.append(shown[index])
            index += 1
    flush_chunk()
    flush_bullets()
    return "\n".join(out), note


def _uncomment(text: str, state: str | None) -> tuple[str, str | None]:
    """`text` without its `%% … %%` / `<!-- … -->` spans, and the comment still open after it."""
    out, position = [], 0
    while position <= len(text):
        if state is None:
            found = [(at, token) for token in _COMMENT_CLOSE if (at := text.find(token, position)) >= 0]
            if not found:
                out.append(text[position:])
                break
            at, state = min(found)
            out.append(text[position:at])
            position = at + len(state)
        else:
            at = text.find(_COMMENT_CLOSE[state], position)
            if at < 0:
                break
            position, state = at + len(_COMMENT_CLOSE[state]), None
    return "".join(out), state


def _visible_lines(note: Note) -> tuple[list[str | None], list[str | None]]:
    """Each line as a reader sees it (comments removed; None: nothing of it is shown), and the
    comment open where it starts. Fenced code is shown as written, as in Obsidian; the fence
    and comment rules are the note parser's own, so the page hides what the index skips."""
    shown: list[str | None] = list(note.lines)
    before: list[str | None] = [None] * len(note.lines)
    in_conflict = {i for first, end in note.conflicts for i in range(first, end)}
    fence, comment = None, None
    for index in range(note.body_start, len(note.lines)):
        if index in in_conflict:
            continue
        raw = note.lines[index]
        body = raw.rstrip("\r\n")
        before[index] = comment
        if comment is None:
            fence, is_fence_line = _track_fence(body, fence)
            if is_fence_line or fence is not None:
                continue
        visible, comment = _uncomment(body, comment)
        if visible.strip() or not body.strip():
            shown[index] = visible + raw[len(body) :]
        else:
            shown[index] = None  # only a comment: the line is not there for a reader
    return shown, before


def _anchor(block_id: str) -> str:
    return f'<a class="anchor" href="#{escape(block_id)}" aria-label="link to this memory">#</a>'


def memory_html(text: str) -> dict[str, str]:
    """Each memory of a note (by id) as safe inline HTML, as the note page shows its text: the
    person's markdown, comments hidden, a task's box. The index keeps plain text (`*x*` is
    indexed as "x"), so a page showing a hit from this shows what was written."""
    note = parse(text)
    _shown, comment_before = _visible_lines(note)
    out = {}
    for bullet, start in zip(note.bullets, note.starts, strict=True):
        shown = _uncomment(bullet.text, comment_before[start])[0]
        task, shown, _done = _task(shown) if bullet.kind == "bullet" else ("", shown, None)
        out[bullet.id] = f"{task}{render_inline(shown)}"
    return out


def _task(text: str) -> tuple[str, str, bool | None]:
    """`[ ] …` / `[x] …` (Obsidian's tasks) → (a disabled checkbox, the rest, done?); else ("", text, None)."""
    match = _TASK_RE.fullmatch(text)
    if match is None:
        return "", text, None
    done = match["mark"] != " "
    box = (
        f'<input type="checkbox" class="task-box" disabled{" checked" if done else ""}'
        f' aria-label="{"done" if done else "open"} task"> '
    )
    return box, match["text"] or "", done


def _bullet_html(bullet, comment: str | None) -> str:
    depth = min(len(bullet.indent.expandtabs(4)) // 2, _MAX_DEPTH)
    time_html = f"<time>{escape(bullet.time)}</time> " if bullet.time else ""
    own = "" if bullet.has_explicit_id else ' title="written by hand: indexed under a derived id"'
    task, text, done = _task(_uncomment(bullet.text, comment)[0])
    classes = f"bullet depth-{depth}" + ("" if done is None else f" task{' done' if done else ''}")
    return (f'<li id="{escape(bullet.id)}" class="{classes}"{own}>{task}{time_html}'
            f'<span class="text">{render_inline(text)}</span> {_anchor(bullet.id)}</li>')  # fmt: skip


def _block_html(bullet, shown: list[str | None], comment: str | None) -> str:
    """A paragraph as a paragraph; a quote as a quote; `> [!type] Title` as Obsidian's callout box
    (`shown`: its lines as a reader sees them, None where hidden)."""
    if bullet.kind != "quote":
        return (f'<p id="{escape(bullet.id)}" class="memory paragraph">'
                f"{render_inline(_uncomment(bullet.text, comment)[0])} {_anchor(bullet.id)}</p>")  # fmt: skip
    lines = [_QUOTE_PREFIX_RE.sub("", line.rstrip("\r\n"), count=1)
             for line in shown if line is not None]  # fmt: skip
    if bullet.has_explicit_id:  # the `^id` at its end is the anchor, not text
        last = max((i for i, line in enumerate(lines) if line.strip()), default=None)
        if last is not None:
            lines[last] = _TRAILING_BLOCK_ID_RE.sub("", lines[last])
    callout = _CALLOUT_RE.fullmatch(lines[0]) if lines else None
    if callout is None:
        return (
            f'<blockquote id="{escape(bullet.id)}" class="memory">{_MD(chr(10).join(lines))}'
            f"{_anchor(bullet.id)}</blockquote>"
        )
    kind = re.sub(r"[^a-z0-9-]", "", callout["type"].strip().lower()) or "note"
    title = render_inline(callout["title"].strip() or kind.capitalize())
    body = _MD("\n".join(lines[1:])) if "".join(lines[1:]).strip() else ""
    classes = f"callout callout-{kind} memory"
    if callout["fold"]:  # `[!note]-` starts folded, `[!note]+` unfolded: a <details>, no script needed
        opened = " open" if callout["fold"] == "+" else ""
        return (f'<details id="{escape(bullet.id)}" class="{classes}"{opened}><summary class="callout-title">{title} '
                f'{_anchor(bullet.id)}</summary><div class="callout-content">{body}</div></details>')  # fmt: skip
    return (f'<div id="{escape(bullet.id)}" class="{classes}"><p class="callout-title">{title} {_anchor(bullet.id)}</p>'
            f'<div class="callout-content">{body}</div></div>')  # fmt: skip
