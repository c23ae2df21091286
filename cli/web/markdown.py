"""Vault markdown to safe HTML, with an anchor on every bullet so a hit's link lands on it.

Every byte of a note is untrusted. mistune renders with `escape=True` (raw HTML becomes text);
links keep only http(s), mailto and in-page targets (anything else, `javascript:` and `data:`
included, is rendered as plain text); images are never loaded (they become a link to their
target, and the page's Content-Security-Policy would refuse a foreign image anyway). Obsidian
wikilinks to notes (`[[2026-11-30#^m-1f3a9c0d2e|label]]`) become links into the Content page.

mistune has no source positions, so the note's structure comes from `memvault.vault.note.parse`
(the parser the index uses): each bullet is rendered on its own as `<li id="<block id>">`, the
same id its index row carries, and the lines between bullets are rendered as markdown blocks.
"""

from __future__ import annotations

import re
from html import escape
from urllib.parse import quote, urlsplit

import mistune
from mistune.renderers.html import HTMLRenderer

from memvault.vault.note import Note, parse

_SAFE_SCHEMES = ("http", "https", "mailto")
_WIKILINK_RE = r"\[\[(?P<wl_target>[^\[\]|\n]{1,200})(?:\|(?P<wl_label>[^\[\]\n]{1,200}))?\]\]"
_NOTE_TARGET_RE = re.compile(r"(?:(?P<folder>daily|audit)/)?(?P<day>\d{4}-\d{2}-\d{2})(?:\.md)?(?:#\^?(?P<block>[A-Za-z0-9][A-Za-z0-9-]{0,63}))?")
_MAX_DEPTH = 4


def note_url(relpath: str, block_id: str | None = None) -> str:
    """`daily/2026-11-30.md` (+ id) → `/notes/daily/2026-11-30#m-…` (the Content page's note view)."""
    stem = relpath[:-3] if relpath.endswith(".md") else relpath
    return f"/notes/{quote(stem)}" + (f"#{quote(block_id)}" if block_id else "")


def source_url(source: str) -> str:
    """A hit's source (`daily/2026-11-30.md#^m-…`) → the link to its bullet."""
    path, _, block = source.partition("#")
    return note_url(path, block.lstrip("^") or None)


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
        return url if parts.scheme.lower() in _SAFE_SCHEMES and (parts.netloc or parts.scheme.lower() == "mailto") else None
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
        match = _NOTE_TARGET_RE.fullmatch(target.strip())
        if match is None:
            return f'<span class="wikilink">{shown}</span>'
        relpath = f"{match['folder'] or 'daily'}/{match['day']}.md"
        return f'<a class="wikilink" href="{escape(note_url(relpath, match["block"]))}">{shown}</a>'

    def block_html(self, html: str) -> str:  # never reached with escape=True; kept inert if it is
        return f"<p>{escape(html)}</p>\n"

    def inline_html(self, html: str) -> str:
        return escape(html)


def _parse_wikilink(inline, match, state):
    state.append_token({"type": "wikilink", "attrs": {"target": match.group("wl_target"), "label": match.group("wl_label")}})
    return match.end()


def _wikilinks(md) -> None:
    md.inline.register("wikilink", _WIKILINK_RE, _parse_wikilink, before="link")
    if md.renderer and md.renderer.NAME == "html":
        md.renderer.register("wikilink", lambda renderer, target, label=None: renderer.wikilink(target, label))


def _markdown():
    return mistune.create_markdown(
        renderer=_SafeRenderer(), escape=True, plugins=["strikethrough", "table", "task_lists", _wikilinks]
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
    """A note as safe HTML with one `<li id=…>` per bullet, and the parsed note."""
    note = parse(text)
    out: list[str] = []
    if note.frontmatter:
        rows = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in note.frontmatter.items())
        out.append(f'<table class="frontmatter">{rows}</table>')
    conflict_at = {first: end for first, end in note.conflicts}
    bullet_at = {bullet.first_line: bullet for bullet in note.bullets}
    chunk: list[str] = []
    bullets: list[str] = []
    index = note.body_start

    def flush_chunk() -> None:
        if chunk:
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
            flush_chunk()
            bullets.append(_bullet_html(bullet_at[index]))
            index = bullet_at[index].end_line
        else:
            if note.lines[index].strip():
                flush_bullets()
            chunk.append(note.lines[index])
            index += 1
    flush_chunk()
    flush_bullets()
    return "\n".join(out), note


def _bullet_html(bullet) -> str:
    depth = min(len(bullet.indent.expandtabs(4)) // 2, _MAX_DEPTH)
    time_html = f'<time>{escape(bullet.time)}</time> ' if bullet.time else ""
    own = "" if bullet.has_explicit_id else ' title="written by hand: indexed under a derived id"'
    anchor = f'<a class="anchor" href="#{escape(bullet.id)}" aria-label="link to this memory">#</a>'
    return (f'<li id="{escape(bullet.id)}" class="bullet depth-{depth}"{own}>{time_html}'
            f'<span class="text">{render_inline(bullet.text)}</span> {anchor}</li>')  # fmt: skip
