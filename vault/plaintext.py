"""The plain text of a bullet's inline markdown: what gets indexed and shown in recall hits.

mistune parses the inline markdown (emphasis, links, code spans, images, HTML); Obsidian
wikilinks `[[target|alias]]` become their visible text. A task's box stays in front of its
text, as `[ ]` (open) or `[x]` (done), so its state is shown with it and can be asked about
(`task_state`; docs/format.md, "Tasks").
"""

import re
from functools import lru_cache

_WIKILINK_RE = re.compile(r"!?\[\[([^\[\]|#^]*)(?:[#^][^\[\]|]*)?(?:\|([^\[\]]*))?\]\]")
_TASK_RE = re.compile(r"^\[(?P<mark>[ xX])\](?:\s+|$)")
OPEN_TASK, DONE_TASK = "[ ] ", "[x] "
#: characters that may start inline markup. "!" only does before "[" (an image) and the parser
#: keeps "&" and entities as written, so dialogue ("Wow!", "Tom & Jerry") skips it (issue 43: 60%
#: of realistic memories went through mistune for a "!")
_MARKUP_CHARS = set("*_[]`<>\\~|")
_WHITESPACE_RE = re.compile(r"\s+")


@lru_cache(maxsize=1)
def _parser():
    import mistune  # when a note is parsed: a search that reads no note never loads it

    return mistune.create_markdown(renderer=None, plugins=["strikethrough"])


def plain_text(markdown: str) -> str:
    text = markdown.strip()
    task = _TASK_RE.match(text)
    if task is None:
        return _plain(text)
    rest = _plain(text[task.end() :])
    return ((OPEN_TASK if task["mark"] == " " else DONE_TASK) + rest) if rest else ""


def task_state(text: str) -> str | None:
    """`"open"` or `"done"` for the plain text of a task, else None."""
    if text.startswith(OPEN_TASK):
        return "open"
    if text.startswith(DONE_TASK):
        return "done"
    return None


def _plain(text: str) -> str:
    text = _WIKILINK_RE.sub(lambda m: (m.group(2) or m.group(1)).strip(), text)
    if _MARKUP_CHARS.isdisjoint(text):
        return _WHITESPACE_RE.sub(" ", text).strip()
    pieces: list[str] = []
    for token in _parser()(text):
        _collect(token, pieces)
        pieces.append(" ")
    return _WHITESPACE_RE.sub(" ", "".join(pieces)).strip()


def _collect(token: dict, pieces: list[str]) -> None:
    kind = token.get("type")
    if kind in ("softbreak", "linebreak"):
        pieces.append(" ")
    elif kind == "image":
        pieces.append(token.get("attrs", {}).get("alt", "") or _children_text(token))
        return
    elif "raw" in token and kind not in ("block_html", "inline_html"):
        pieces.append(token["raw"])
    for child in token.get("children", ()) or ():
        _collect(child, pieces)


def _children_text(token: dict) -> str:
    pieces: list[str] = []
    for child in token.get("children", ()) or ():
        _collect(child, pieces)
    return "".join(pieces)
