"""BuJo capture: turning an admitted turn into curated facts, graph associations and replay state.

    record (awaiting capture) → plan_capture (≤ 2 model calls, strict parsers) → retained plan
        → commit_plan (daily/ facts, graph.jsonl, replay sidecar) → index → resolve → retire plan

`vault/capture` holds the prompts, the strict parsers, the plan and the commit protocol; the
model and the candidate lookup arrive through the small protocols in `pipeline.py`, so all of
it runs without HTTP. `indexer/services/capture.py` wires it to the store and the intake worker.
See docs/capture.md.
"""

#: every named commit boundary capture passes (after the intake's own), in order
CAPTURE_BOUNDARIES = (
    "capture.extracted",
    "capture.reconciled",
    "capture.plan_written",
    "capture.facts_written",
    "capture.graph_written",
    "capture.sidecar_written",
    "capture.indexed",
    "capture.plan_retired",
)

__all__ = ["CAPTURE_BOUNDARIES"]
