"""The plain text of a bullet's inline markdown: what gets indexed and shown in recall hits.

mistune parses the inline markdown (emphasis, links, code spans, images, HTML); Obsidian
wikilinks `[[target|alias]]` become their visible text and task boxes are dropped.
"""

import re
from functools import lru_cache

_WIKILINK_RE = re.compile(r"!?\[\[([^\[\]|#^]*)(?:[#^][^\[\]|]*)?(?:\|([^\[\]]*))?\]\]")
_TASK_RE = re.compile(r"^\[[ xX]\]\s+")
_MARKUP_CHARS = set("*_[]`<>!\\&~|")
_WHITESPACE_RE = re.compile(r"\s+")


@lru_cache(maxsize=1)
def _parser():
    import mistune  # when a note is parsed: a search that reads no note never loads it

    return mistune.create_markdown(renderer=None, plugins=["strikethrough"])


def plain_text(markdown: str) -> str:
    text = _TASK_RE.sub("", markdown.strip())
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
