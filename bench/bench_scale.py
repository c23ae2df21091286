"""A vault that grows for years: rebuild, recall, owner memory and bulk import at 10k / 100k (/ 1M).

    python -m bench.bench_scale [--sizes 10000,100000] [--million] [--import-batch 5000]
                                [--recalls 200] [--data ../shared/eval/locomo-dev.json] [--tmp /tmp]

Issue #43. At each size a Journal vault (100 memories per day note, builtin 256-d vectors) is
written straight to its files, then measured as a person meets it:

- **rebuild**: `memvault rebuild` in its own process (wall time, and that process's peak RSS);
- **owner**: `memvault serve` in its own process (time until it answers, and the first recall, which
  loads the index); after a warm-up of recalls, its RSS (VmRSS from
  /proc/<pid>/status) and hybrid recall p50 / p95 through the owner's channel (the Python client,
  tool mode, limit 10: what `memvault search` asks);
- **bulk import**: `memvault remember --from FILE` of the same batch of lines (dated after the
  vault's last day) through the owner, into an empty vault and into the vault at that size, both
  in the same run. The rate counts until the command returns (notes written, BM25 committed);
  vectors follow in the owner's background.

Memories are realistic text recombined from the LoCoMo dialogue (one to three sentences of one
speaker's turns), read where it lies at run time and never copied; without the file the
project's own generator (bench/generate.py) writes them. Queries are LoCoMo's questions.

Prints one table, then each figure's growth between consecutive sizes (ratio beside the size
ratio), the baselines measured in the same run beside them: the CLI's start-up floor
(`memvault --help`) beside the rebuild time, the import into an empty vault beside the import
into the full one. Asserts nothing: on a shared machine the figures are noisy. Targets (issue
#43): owner RSS ≤ 200 MB at 100k and ≤ 1.5 GB at 1M; import into a 300k vault ≥ 90% of the rate
into an empty one; recall p95 at 1M ≤ 1.5x its value at 100k; rebuild of 1M ≤ 5 minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from itertools import pairwise
from pathlib import Path

from bench.generate import sentence
from memvault.vault.config import default_config_data, render_config
from memvault.vault.ids import memory_id
from memvault.vault.init import init_vault
from memvault.vault.note import format_bullet, new_note_text

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO.parent / "shared" / "eval" / "locomo-dev.json"
MEMVAULT = [sys.executable, "-m", "memvault"]
#: bytecode caching on, as on a normal install; no MEMVAULT_* setting of the caller leaks in
ENV = {**{k: v for k, v in os.environ.items() if not k.startswith("MEMVAULT_") and k != "PYTHONDONTWRITEBYTECODE"},
       "PYTHONPATH": str(REPO)}  # fmt: skip
PER_DAY = 100
FIRST_DAY = date(2000, 1, 1)
IMPORT_DAY = datetime.fromisoformat("2040-01-01T08:00:00+00:00")  # after any vault's last day
WARM_UP = 20
OWNER_START_SECONDS = 1800


# -- text ----------------------------------------------------------------------------------------


class Texts:
    """Distinct memories: LoCoMo sentences recombined per speaker, or the generator's sentences."""

    def __init__(self, data: Path | None, seed: int = 1):
        self.rng = random.Random(seed)
        self.seen: set[str] = set()
        self.count = 0
        self.speakers: list[tuple[str, list[str]]] = []
        self.questions: list[str] = []
        if data is not None and data.exists():
            self._read(data)

    def _read(self, data: Path) -> None:
        by_speaker: dict[str, list[str]] = {}
        for sample in json.loads(data.read_text(encoding="utf-8")):
            conversation = sample["conversation"]
            for key, turns in conversation.items():
                if not re.fullmatch(r"session_\d+", key) or not isinstance(turns, list):
                    continue
                for turn in turns:
                    parts = re.split(r"(?<=[.!?])\s+", " ".join(turn["text"].split()))
                    by_speaker.setdefault(turn["speaker"], []).extend(p for p in parts if len(p) > 3)
            self.questions += [qa["question"] for qa in sample.get("qa", []) if qa.get("question")]
        self.speakers = sorted(by_speaker.items())

    @property
    def source(self) -> str:
        return "LoCoMo dialogue, recombined" if self.speakers else "bench/generate.py sentences"

    def next(self) -> str:
        while True:
            text = self._candidate()
            if text not in self.seen:
                self.seen.add(text)
                self.count += 1
                return text

    def _candidate(self) -> str:
        if not self.speakers:
            return sentence(self.rng, self.count)
        speaker, pool = self.rng.choice(self.speakers)
        picked = " ".join(self.rng.choice(pool) for _ in range(self.rng.randint(1, 3)))
        return f"{speaker}: {picked}"

    def queries(self, count: int) -> list[str]:
        rng = random.Random(7)
        if self.questions:
            return [rng.choice(self.questions) for _ in range(count)]
        return [sentence(rng, n).rsplit(" (", 1)[0] for n in range(count)]


# -- vaults --------------------------------------------------------------------------------------


def new_vault(root: Path) -> Path:
    init_vault(root, render_config(default_config_data(mode="journal", time_zone="UTC")))
    return root


def write_notes(root: Path, texts: Texts, start: int, count: int) -> None:
    """Memories start … start+count-1 as bullets, PER_DAY a day note from FIRST_DAY on."""
    lines_by_day: dict[date, list[str]] = {}
    for n in range(start, start + count):
        day = FIRST_DAY + timedelta(days=n // PER_DAY)
        lines = lines_by_day.setdefault(day, [])
        text = texts.next()
        hh, mm = divmod(8 * 60 + (n % PER_DAY) * 8, 60)
        lines.append(format_bullet(text, memory_id(text), f"{hh:02d}:{mm:02d}"))
    for day, lines in lines_by_day.items():
        path = root / "daily" / f"{day.isoformat()}.md"
        head = path.read_text(encoding="utf-8") if path.exists() else new_note_text(day.isoformat())
        path.write_text(head + "".join(lines), encoding="utf-8")


def import_lines(texts: Texts, count: int) -> str:
    rows = []
    for n in range(count):
        at = IMPORT_DAY + timedelta(minutes=10 * n)
        rows.append(json.dumps({"text": texts.next(), "at": at.isoformat()}) + "\n")
    return "".join(rows)


# -- processes -----------------------------------------------------------------------------------


def run(args: list[str], log: Path, stdin: Path | None = None) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one memvault process; raises when it fails."""
    started = time.perf_counter()
    with open(log, "ab") as err, open(stdin or os.devnull, "rb") as feed:
        proc = subprocess.Popen(args, env=ENV, cwd=REPO, stdin=feed, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args[2:])} exited {proc.returncode}: see {log}")
    return seconds, usage.ru_maxrss / 1024


class Owner:
    """`memvault serve` in its own process, up once it answers on its channel."""

    def __init__(self, root: Path, log: Path):
        from memvault.indexer.engine.client import find_owner

        started = time.perf_counter()
        self._err = open(log, "ab")
        self.proc = subprocess.Popen(
            [*MEMVAULT, "--vault", str(root), "serve"], env=ENV, cwd=REPO, stdout=subprocess.DEVNULL, stderr=self._err
        )
        deadline = time.monotonic() + OWNER_START_SECONDS
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the owner exited {self.proc.returncode}: see {log}")
            found = find_owner(root)
            if found is not None and found.pid == self.proc.pid:
                self.ready_seconds = time.perf_counter() - started
                return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("the owner did not come up")

    def rss_mb(self) -> float:
        for row in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if row.startswith("VmRSS:"):
                return int(row.split()[1]) / 1024
        return float("nan")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(300)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._err.close()


# -- measuring -----------------------------------------------------------------------------------


@dataclass
class Figures:
    size: int
    write_s: float = 0.0
    rebuild_s: float = 0.0
    rebuild_peak_mb: float = 0.0
    owner_ready_s: float = 0.0
    first_recall_s: float = 0.0  # the owner loads its index on the first recall
    recall_ms: list[float] = field(default_factory=list)
    rss_mb: float = 0.0
    import_empty: float = 0.0  # memories per second
    import_full: float = 0.0
    rss_after_import_mb: float = 0.0

    @property
    def p50(self) -> float:
        return percentile(self.recall_ms, 0.50)

    @property
    def p95(self) -> float:
        return percentile(self.recall_ms, 0.95)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def recalls(root: Path, queries: list[str]) -> list[float]:
    from memvault import MemoryStore

    samples = []
    with MemoryStore.open(root) as client:
        if type(client).__name__ != "RemoteStore":
            raise RuntimeError("recall did not go through the owner")
        for query in queries:
            started = time.perf_counter()
            client.recall(query, limit=10)
            samples.append((time.perf_counter() - started) * 1000)
    return samples


def import_rate(root: Path, batch: Path, count: int, log: Path) -> float:
    seconds, _ = run([*MEMVAULT, "--vault", str(root), "remember", "--from", str(batch), "--json"], log)
    return count / seconds


def measure(size: int, tmp: Path, texts: Texts, options: argparse.Namespace) -> Figures:
    figures = Figures(size)
    log = tmp / "memvault.log"
    root = new_vault(tmp / f"vault-{size}")
    started = time.perf_counter()
    for start in range(0, size, 50_000):  # bounded memory while the notes are written
        write_notes(root, texts, start, min(50_000, size - start))
    figures.write_s = time.perf_counter() - started
    progress(f"{size:,}: notes written in {figures.write_s:.1f} s; rebuilding")
    figures.rebuild_s, figures.rebuild_peak_mb = run([*MEMVAULT, "--vault", str(root), "rebuild", "--json"], log)
    progress(f"{size:,}: rebuilt in {figures.rebuild_s:.1f} s; starting the owner")
    batch = tmp / "import.jsonl"
    batch.write_text(import_lines(texts, options.import_batch), encoding="utf-8")
    owner = Owner(root, log)
    try:
        figures.owner_ready_s = owner.ready_seconds
        queries = texts.queries(WARM_UP + options.recalls)
        figures.first_recall_s = recalls(root, queries[:1])[0] / 1000
        recalls(root, queries[1:WARM_UP])
        figures.rss_mb = owner.rss_mb()
        figures.recall_ms = recalls(root, queries[WARM_UP:])
        progress(f"{size:,}: owner {figures.rss_mb:.0f} MB, recall p50 {figures.p50:.1f} ms; importing")
        figures.import_full = import_rate(root, batch, options.import_batch, log)
        figures.rss_after_import_mb = owner.rss_mb()
    finally:
        owner.stop()
    shutil.rmtree(root)
    empty = new_vault(tmp / f"empty-{size}")
    owner = Owner(empty, log)
    try:
        figures.import_empty = import_rate(empty, batch, options.import_batch, log)
    finally:
        owner.stop()
    shutil.rmtree(empty)
    return figures


def progress(message: str) -> None:
    print(f"  [{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- report --------------------------------------------------------------------------------------

COLUMNS = [
    ("memories", lambda f: f"{f.size:,}"),
    ("rebuild s", lambda f: f"{f.rebuild_s:.1f}"),
    ("rebuild peak MB", lambda f: f"{f.rebuild_peak_mb:.0f}"),
    ("owner up s", lambda f: f"{f.owner_ready_s:.1f}"),
    ("first recall s", lambda f: f"{f.first_recall_s:.1f}"),
    ("recall p50 ms", lambda f: f"{f.p50:.1f}"),
    ("recall p95 ms", lambda f: f"{f.p95:.1f}"),
    ("owner RSS MB", lambda f: f"{f.rss_mb:.0f}"),
    ("RSS after import MB", lambda f: f"{f.rss_after_import_mb:.0f}"),
    ("import empty /s", lambda f: f"{f.import_empty:,.0f}"),
    ("import at size /s", lambda f: f"{f.import_full:,.0f}"),
    ("at size / empty", lambda f: f"{f.import_full / f.import_empty:.2f}"),
]

GROWTH = [
    ("rebuild s", lambda f: f.rebuild_s),
    ("recall p50", lambda f: f.p50),
    ("recall p95", lambda f: f.p95),
    ("owner RSS", lambda f: f.rss_mb),
    ("import at size", lambda f: f.import_full),
]


def table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["| " + " | ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)) + " |" for row in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 1) + ":" for w in widths) + "|")
    return "\n".join(lines)


def report(results: list[Figures], floor_s: float, batch: int, source: str) -> str:
    out = [
        f"Journal vaults, {PER_DAY} memories a day, builtin 256-d vectors; text: {source}; "
        f"import batch {batch:,} lines; floor `memvault --help` {floor_s:.2f} s (inside every process time)",
        "",
        table([[name for name, _ in COLUMNS]] + [[cell(f) for _, cell in COLUMNS] for f in results]),
    ]
    if len(results) > 1:
        rows = [["growth", "size x", *(name for name, _ in GROWTH)]]
        for before, after in pairwise(results):
            ratios = [value(after) / value(before) if value(before) else float("nan") for _, value in GROWTH]
            rows.append(
                [f"{before.size:,} → {after.size:,}", f"{after.size / before.size:.1f}", *(f"{r:.2f}" for r in ratios)]
            )
        out += ["", table(rows)]
        per = [
            f"{(b.rss_mb - a.rss_mb) / (b.size - a.size) * 1000:.2f} MB"
            for a, b in pairwise(results)
            if b.size > a.size
        ]
        out += ["", f"owner RSS per 1,000 more memories: {', '.join(per)} (the float32 vectors alone: 0.98 MB)"]
    out += ["", "Noisy: a shared machine; compare figures within one run, not across runs."]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000", help="comma-separated vault sizes")
    parser.add_argument("--million", action="store_true", help="also measure 1,000,000 memories (long)")
    parser.add_argument("--import-batch", type=int, default=5000, help="lines per bulk import")
    parser.add_argument("--recalls", type=int, default=200, help="timed recalls per size (after a warm-up)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="LoCoMo JSON (read, never copied)")
    parser.add_argument("--tmp", type=Path, default=None, help="where the vaults are built (deleted after)")
    options = parser.parse_args(argv)
    sizes = sorted(
        {int(s) for s in options.sizes.split(",") if s.strip()} | ({1_000_000} if options.million else set())
    )
    texts = Texts(options.data)
    with tempfile.TemporaryDirectory(prefix="memvault-scale-", dir=options.tmp) as tmp:
        tmp = Path(tmp)
        floor_s, _ = run([*MEMVAULT, "--help"], tmp / "memvault.log")  # bytecode written once
        floor_s, _ = run([*MEMVAULT, "--help"], tmp / "memvault.log")
        results = [measure(size, tmp, texts, options) for size in sizes]
    text = report(results, floor_s, options.import_batch, texts.source)
    print(text)
    return text


if __name__ == "__main__":
    main()
