"""The shapes of the two capture answers, declared once, with their two uses.

A shape is a small tree of nodes (`Record`, `ArrayOf`, `SafeText`, `Pattern`, `Choice`,
`UnitNumber`, `Integer`, `Tagged`). From the same tree come

- `check(shape, value, where, fields)`: the structural half of the strict parsers in
  `extraction.py` and `reconcile.py` (exact fields, types, bounds, grammars), and
- `json_schema(shape)`: the JSON Schema sent to the model as a generation constraint (Ollama
  `format`, OpenAI-compatible `response_format: json_schema` with `strict`).

So the parser and the constraint cannot drift apart: a test proves every answer the parser
accepts is valid under the schema. The schema is only a hint to the model; the parser stays
authoritative. What the schema cannot say (the parsers check it after `check`):

- references: every entity ref a memory or relation names is declared, every declared entity
  is used, refs and (name, type) pairs are unique, a relation never joins an entity to itself
  and never repeats; a decision's target is one supplied *for its own index*, an index is
  decided once, and a replaced target is named by no other decision;
- safe text beyond its length: one NFKC-normalised line, no control/format/private-use
  characters, no trailing `^block-id`, nothing that looks like a credential, and it survives
  the note format;
- the 262,144-character completion cap, the nesting cap and duplicate keys (JSON Schema sees a
  parsed value, where duplicates are already gone);
- bounds a provider ignores: llama.cpp and Ollama turn the schema into a grammar and keep
  array bounds, lengths and patterns, but OpenAI's strict mode accepts only a subset of JSON
  Schema; whatever a server drops, the parser still refuses.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memvault.vault.capture.fields import Fields

#: JSON syntax around one field (the key's quotes, colon, comma and a space or two): what
#: `max_answer_chars` adds to each field besides its name
_KEY_OVERHEAD = 6
#: fewest characters one generated token stands for in the worst case we size for; English JSON
#: runs at 3-4 characters a token in the tokenizers of common local models
_CHARS_PER_TOKEN = 3
_TOKEN_SLACK = 64


@dataclass(frozen=True)
class SafeText:
    max_chars: int


@dataclass(frozen=True)
class Pattern:
    regex: re.Pattern[str]
    grammar: str  # how an error message names it
    max_chars: int


@dataclass(frozen=True)
class Choice:
    options: tuple[Any, ...]
    problem: str | None = None  # the error message's wording, when "must be one of" misleads


@dataclass(frozen=True)
class UnitNumber:
    pass


@dataclass(frozen=True)
class Integer:
    options: tuple[int, ...] | None = None
    problem: str | None = None


@dataclass(frozen=True)
class ArrayOf:
    item: Node
    min_items: int
    max_items: int
    unique: bool = False


@dataclass(frozen=True)
class Record:
    fields: tuple[tuple[str, Node], ...]

    @property
    def keys(self) -> set[str]:
        return {name for name, _ in self.fields}


@dataclass(frozen=True)
class Tagged:
    """One of several records, told apart by the exact value of one field (`tag`)."""

    tag: str
    variants: tuple[tuple[str, Record], ...]


Node = SafeText | Pattern | Choice | UnitNumber | Integer | ArrayOf | Record | Tagged


# --- use 1: the structural check --------------------------------------------------------------


def check(node: Node, value: Any, where: str, fields: Fields) -> None:
    """Raise ModelOutputInvalid (through `fields`) unless `value` has exactly this shape."""
    if isinstance(node, Record):
        item = fields.object(value, node.keys, where)
        for name, child in node.fields:
            check(child, item[name], f"{where}.{name}" if where != "the answer" else name, fields)
    elif isinstance(node, Tagged):
        _check_tagged(node, value, where, fields)
    elif isinstance(node, ArrayOf):
        items = fields.array(value, where, node.min_items, node.max_items)
        for position, child in enumerate(items):
            check(node.item, child, f"{where}[{position}]", fields)
        if node.unique and len(set(map(repr, items))) != len(items):
            raise fields.fail(f"{where} names an item twice")
    elif isinstance(node, SafeText):
        fields.safe_text(value, where, node.max_chars)
    elif isinstance(node, Pattern):
        fields.pattern(value, node.regex, where, node.grammar)
    elif isinstance(node, Choice):
        if not isinstance(value, str) or value not in node.options:
            raise fields.fail(f"{where} {node.problem or 'must be one of ' + ', '.join(map(str, node.options))}")
    elif isinstance(node, UnitNumber):
        fields.unit_number(value, where)
    elif isinstance(node, Integer):
        fields.integer(value, where)
        if node.options is not None and value not in node.options:
            raise fields.fail(f"{where} {value} {node.problem or 'is not allowed'}")
    else:  # pragma: no cover - a new node kind without a check is a programming error
        raise TypeError(f"no check for {node!r}")


def _check_tagged(node: Tagged, value: Any, where: str, fields: Fields) -> None:
    if not isinstance(value, dict):
        raise fields.fail(f"{where} must be an object")
    variants = dict(node.variants)
    tag = value.get(node.tag)
    if not isinstance(tag, str) or tag not in variants:
        raise fields.fail(f"{where}.{node.tag} must be exactly one of {', '.join(variants)}")
    check(variants[tag], value, f"{where} ({tag})", fields)


# --- use 2: the JSON Schema -------------------------------------------------------------------


def json_schema(node: Node) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12 subset that grammar-constrained servers understand)."""
    if isinstance(node, Record):
        return {
            "type": "object",
            "properties": {name: json_schema(child) for name, child in node.fields},
            "required": [name for name, _ in node.fields],
            "additionalProperties": False,
        }
    if isinstance(node, Tagged):
        return {"anyOf": [_tagged_variant(node.tag, tag, record) for tag, record in node.variants]}
    if isinstance(node, ArrayOf):
        schema = {
            "type": "array",
            "items": json_schema(node.item),
            "minItems": node.min_items,
            "maxItems": node.max_items,
        }
        if node.unique:
            schema["uniqueItems"] = True
        return schema
    if isinstance(node, SafeText):
        return {"type": "string", "minLength": 1, "maxLength": node.max_chars}
    if isinstance(node, Pattern):
        return {"type": "string", "pattern": f"^{node.regex.pattern}$"}
    if isinstance(node, Choice):
        return {"type": "string", "enum": list(node.options)}
    if isinstance(node, UnitNumber):
        return {"type": "number", "minimum": 0, "maximum": 1}
    if isinstance(node, Integer):
        return (
            {"type": "integer", "minimum": 0}
            if node.options is None
            else {"type": "integer", "enum": list(node.options)}
        )
    raise TypeError(f"no schema for {node!r}")  # pragma: no cover


def _tagged_variant(tag_field: str, tag: str, record: Record) -> dict[str, Any]:
    schema = json_schema(record)
    schema["properties"][tag_field] = {"type": "string", "enum": [tag]}
    return schema


# --- sizing the model's output ------------------------------------------------------------------


def max_answer_chars(node: Node) -> int:
    """The longest answer this shape admits (compact JSON, plus syntax slack per value)."""
    if isinstance(node, Record):
        return 2 + sum(_KEY_OVERHEAD + len(name) + max_answer_chars(child) for name, child in node.fields)
    if isinstance(node, Tagged):
        return max(max_answer_chars(record) for _, record in node.variants)
    if isinstance(node, ArrayOf):
        return 2 + node.max_items * (2 + max_answer_chars(node.item))
    if isinstance(node, SafeText):
        return node.max_chars + 2
    if isinstance(node, Pattern):
        return node.max_chars + 2
    if isinstance(node, Choice):
        return 2 + max(len(str(option)) for option in node.options)
    if isinstance(node, UnitNumber):
        return 20  # 0.12345678901234567
    if isinstance(node, Integer):
        return 6
    raise TypeError(f"no size for {node!r}")  # pragma: no cover


def max_output_tokens(node: Node) -> int:
    """The token cap for one answer of this shape: its longest valid answer must fit."""
    return math.ceil(max_answer_chars(node) / _CHARS_PER_TOKEN) + _TOKEN_SLACK


@dataclass(frozen=True)
class OutputSpec:
    """What one model call must produce: the schema's name, the schema and the token cap."""

    name: str
    schema: Mapping[str, Any]
    max_tokens: int


def output_spec(name: str, node: Node) -> OutputSpec:
    return OutputSpec(name, json_schema(node), max_output_tokens(node))


def offered_choice(ids: Sequence[str]) -> Choice:
    return Choice(tuple(sorted(set(ids))), "must be one of the candidate ids supplied")
