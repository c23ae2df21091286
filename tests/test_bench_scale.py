"""bench/bench_scale.py runs end to end at a tiny size: every figure is printed and sane.

A smoke test only: speed lives in bench/, nothing here is timed against a bound."""

import argparse
import math
from pathlib import Path

import pytest

from bench.bench_scale import COLUMNS, DEFAULT_DATA, Texts, measure, owner_recall, report


def test_a_tiny_scale_run_reports_every_figure_and_each_is_sane(tmp_path: Path):
    texts = Texts(DEFAULT_DATA)
    options = argparse.Namespace(import_batch=30, recalls=5)
    figures = [measure(size, tmp_path, texts, options) for size in (150, 300)]
    for f in figures:
        assert f.rebuild_s > 0 and f.rebuild_peak_mb > 0
        assert f.owner_ready_s > 0 and f.first_recall_s > 0
        assert len(f.recall_ms) == 5 and all(ms > 0 for ms in f.recall_ms)
        assert 0 < f.p50 <= f.p95
        assert f.rss_mb > 0 and f.rss_after_import_mb > 0
        for rate in (f.import_empty, f.import_full, f.vectors_empty, f.vectors_full):
            assert rate > 0 and math.isfinite(rate)
    text = report(figures, 0.5, 30, texts.source)
    header = text.splitlines()[2]
    assert all(name in header for name, _ in COLUMNS)
    assert "150 → 300" in text and "owner RSS per 1,000 more memories" in text
    assert "nan" not in text


@pytest.mark.one_engine(
    "a smoke test of bench/bench_scale.py, which builds and measures its own vaults on the local engine "
    "(its new_vault has no index block and the bench no option for a server): it checks the bench, not an engine"
)
def test_the_vault_it_builds_answers_recall_with_hits(tmp_path: Path):
    from bench.bench_scale import MEMVAULT, Owner, new_vault, run, write_notes

    texts = Texts(DEFAULT_DATA)
    root = new_vault(tmp_path / "v")
    write_notes(root, texts, 0, 120)
    run([*MEMVAULT, "--vault", str(root), "rebuild", "--json"], tmp_path / "log")
    owner = Owner(root, tmp_path / "log")
    try:
        written = min(texts.seen)
        answer = owner_recall(root, written)
    finally:
        owner.stop()
    assert answer["hits"] and answer["hits"][0]["text"] == written
