"""An immutable set that grows without copying what it already holds.

A day's note of thousands of memories is parsed again after every append, from where the last
parse ended (vault/note.py): the ids given so far and the ids marked anywhere in the note are
carried on and extended by the few lines appended. As frozensets, every such parse copied both
whole (about 0.6 ms at 12,000 ids, on every write a busy owner made).

A `LayeredSet` keeps disjoint frozensets, largest first, and merges the newest layer into the one
below it once it is as large (as a binary counter carries): adding k items to n costs
O(k log n) in all, and a lookup looks in at most log2(n) + 1 layers.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import chain

#: up to this many items are added by looking each up in the layers
_FEW = 64


class LayeredSet:
    __slots__ = ("_layers",)

    def __init__(self, items: Iterable[str] = ()):
        layer = frozenset(items)
        self._layers: tuple[frozenset, ...] = (layer,) if layer else ()

    @classmethod
    def _of(cls, layers: tuple[frozenset, ...]) -> LayeredSet:
        made = cls.__new__(cls)
        made._layers = layers
        return made

    def __contains__(self, item: object) -> bool:
        for layer in self._layers:
            if item in layer:
                return True
        return False

    def __iter__(self) -> Iterator[str]:
        return chain.from_iterable(self._layers)

    def whole(self) -> frozenset:
        """The items as one frozenset (made at C speed; the only layer itself when there is one)."""
        if len(self._layers) == 1:
            return self._layers[0]
        return frozenset().union(*self._layers)

    def __len__(self) -> int:
        return sum(len(layer) for layer in self._layers)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LayeredSet):
            other = other.whole()
        if not isinstance(other, (set, frozenset)):
            return NotImplemented
        return self.whole() == other

    def __hash__(self) -> int:
        return hash(self.whole())

    def __repr__(self) -> str:
        return f"LayeredSet({sorted(self)!r})"

    def __or__(self, other: Iterable[str]) -> LayeredSet:
        """This set with `other`'s items added; only the new ones are stored again."""
        top = frozenset(other)
        if len(top) <= _FEW:  # an append's few ids: looked up (a difference walks each layer but the first whole)
            top = frozenset(item for item in top if item not in self)
        else:
            top = top.difference(*self._layers)  # many new items (a first parse), at C speed
        if not top:
            return self
        layers = list(self._layers)
        while layers and len(layers[-1]) <= len(top):
            top = layers.pop() | top
        layers.append(top)
        return LayeredSet._of(tuple(layers))

    def difference(self, other: Iterable[str]) -> LayeredSet:
        """This set less `other`'s items: only the layers holding one are copied (the ids of a
        note's last lines, which a person's save rewrote, are in its newest, smallest layers)."""
        gone = frozenset(other)
        layers = (layer if layer.isdisjoint(gone) else layer.difference(gone) for layer in self._layers)
        return LayeredSet._of(tuple(layer for layer in layers if layer))
