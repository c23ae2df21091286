"""Layouts the templates draw as inline SVG: an entity's neighbourhood, and memories per day.

Only numbers and (escaped by the template) names come out of here: the SVG markup itself is in
the templates, so Jinja's autoescape covers every name. Layouts are deterministic: the same
graph draws the same picture.
"""

from __future__ import annotations

import math

MAX_NEIGHBOURS = 16
_WIDTH, _HEIGHT, _RADIUS = 720, 440, 165
_LABEL_CHARS = 22


def _short(text: str, limit: int = _LABEL_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def neighbourhood(graph, entity_id: str) -> dict:
    """The entity in the middle, up to MAX_NEIGHBOURS neighbours on a circle, relations as edges."""
    centre = graph.entities[entity_id]
    labels: dict[str, list[str]] = {}
    for a, relation, b in sorted(graph.relations):
        if a == entity_id and b in graph.entities and b != entity_id:
            labels.setdefault(b, []).append(relation)
        elif b == entity_id and a in graph.entities and a != entity_id:
            labels.setdefault(a, []).append(f"← {relation}")  # the other entity points at this one
    neighbours = sorted(labels, key=lambda e: (graph.entities[e].name.casefold(), e))
    shown = neighbours[:MAX_NEIGHBOURS]
    cx, cy = _WIDTH / 2, _HEIGHT / 2
    nodes = [{"id": centre.id, "name": centre.name, "label": _short(centre.name), "type": centre.type,
              "x": cx, "y": cy, "centre": True, "url": f"/entities/{centre.id}"}]  # fmt: skip
    edges = []
    for index, other in enumerate(shown):
        angle = -math.pi / 2 + 2 * math.pi * index / max(len(shown), 1)
        x, y = round(cx + _RADIUS * 1.45 * math.cos(angle), 1), round(cy + _RADIUS * math.sin(angle), 1)
        entity = graph.entities[other]
        nodes.append({"id": other, "name": entity.name, "label": _short(entity.name), "type": entity.type,
                      "x": x, "y": y, "centre": False, "url": f"/entities/{other}"})  # fmt: skip
        edges.append({"x1": cx, "y1": cy, "x2": x, "y2": y, "lx": round((cx + x) / 2, 1),
                      "ly": round((cy + y) / 2 - 4, 1), "label": _short(", ".join(labels[other]), 28)})  # fmt: skip
    return {"width": _WIDTH, "height": _HEIGHT, "nodes": nodes, "edges": edges, "more": len(neighbours) - len(shown)}


def day_bars(counts: list[tuple[str, int]], *, width: int = 720, height: int = 150) -> dict:
    """Bars for (day, memories) pairs, oldest first, scaled to the busiest day."""
    top = max((n for _, n in counts), default=0)
    slot = width / max(len(counts), 1)
    chart_height = height - 22
    bars = []
    for index, (day, n) in enumerate(counts):
        h = 0 if top == 0 else round(chart_height * n / top, 1)
        bars.append({"day": day, "count": n, "x": round(index * slot + 1, 1), "w": round(max(slot - 2, 1), 1),
                     "y": round(chart_height - h, 1), "h": h})  # fmt: skip
    ticks = [bars[i] for i in range(0, len(bars), max(1, len(bars) // 6))] if bars else []
    return {"width": width, "height": height, "bars": bars, "max": top, "ticks": ticks, "axis": chart_height}
