"""A vault that grows for years: rebuild, recall, owner memory and bulk import at 10k / 100k (/ 1M).

    python -m bench.bench_scale [--sizes 10000,100000] [--million] [--import-batch 5000]
                                [--recalls 200] [--data ../shared/eval/locomo-dev.json] [--tmp /tmp]

Issue #43. At each size a Journal vault (100 memories per day note, builtin 256-d vectors) is
written straight to its files, then measured as a person meets it:

- **rebuild**: `memvault rebuild` in its own process (wall time, and that process's peak RSS);
- **owner**: `memvault serve` in its own process (time until it answers, and the first recall, which
  waits for it to load the index); after a warm-up of recalls, its RSS (VmRSS from
  /proc/<pid>/status) and hybrid recall p50 / p95 answered by the owner over its channel (tool
  mode, limit 10: what `memvault search` and MCP get; a long-lived Python client would rank in its
  own process instead);
- **bulk import**: `memvault remember --from FILE` of the same batch of lines (dated after the
  vault's last day) through the owner, into an empty vault and into the vault at that size, both
  in the same run. One rate counts until the command returns (notes written, BM25 committed),
  the other (+vectors) until the owner's vector search finds the batch's last memory as well.

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
VECTORS_WAIT_SECONDS = 900


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


def import_lines(texts: Texts, count: int) -> tuple[str, str]:
    """JSON lines of `count` new memories, and the last one's text."""
    rows, text = [], ""
    for n in range(count):
        at, text = IMPORT_DAY + timedelta(minutes=10 * n), texts.next()
        rows.append(json.dumps({"text": text, "at": at.isoformat()}) + "\n")
    return "".join(rows), text


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
    vectors_empty: float = 0.0  # memories per second until their vectors are saved too
    vectors_full: float = 0.0
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
    """Milliseconds per recall answered by the owner itself (tool mode, limit 10), as `memvault
    search` and MCP are answered; a long-lived Python client would rank in its own process."""
    samples = []
    for query in queries:
        started = time.perf_counter()
        owner_recall(root, query)
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def owner_recall(root: Path, query: str, limit: int = 10) -> dict:
    from memvault.indexer.engine.client import find_owner

    return find_owner(root).call("recall", {"query": query, "limit": limit, "mode": "tool"})


def import_rate(root: Path, batch: Path, last: str, count: int, log: Path) -> tuple[float, float]:
    """Memories per second until `remember --from` returns, and until the owner's vector search
    finds the batch's last memory too (vectors are embedded in order: then every one is in)."""
    started = time.perf_counter()
    run([*MEMVAULT, "--vault", str(root), "remember", "--from", str(batch), "--json"], log)
    returned = time.perf_counter() - started
    deadline = time.monotonic() + VECTORS_WAIT_SECONDS
    while not has_vector(root, last):
        if time.monotonic() > deadline:
            return count / returned, float("nan")
        time.sleep(0.05)
    return count / returned, count / (time.perf_counter() - started)


def has_vector(root: Path, text: str) -> bool:
    hits = owner_recall(root, text)["hits"]
    return any(hit["text"] == text and "vector" in hit.get("explain", {}) for hit in hits)


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
    lines, last = import_lines(texts, options.import_batch)
    batch.write_text(lines, encoding="utf-8")
    owner = Owner(root, log)
    try:
        figures.owner_ready_s = owner.ready_seconds
        queries = texts.queries(WARM_UP + options.recalls)
        figures.first_recall_s = recalls(root, queries[:1])[0] / 1000
        recalls(root, queries[1:WARM_UP])
        figures.rss_mb = owner.rss_mb()
        figures.recall_ms = recalls(root, queries[WARM_UP:])
        progress(f"{size:,}: owner {figures.rss_mb:.0f} MB, recall p50 {figures.p50:.1f} ms; importing")
        figures.import_full, figures.vectors_full = import_rate(root, batch, last, options.import_batch, log)
        figures.rss_after_import_mb = owner.rss_mb()
    finally:
        owner.stop()
    shutil.rmtree(root)
    empty = new_vault(tmp / f"empty-{size}")
    run([*MEMVAULT, "--vault", str(empty), "rebuild", "--json"], log)  # an index, as the full vault has
    owner = Owner(empty, log)
    try:
        figures.import_empty, figures.vectors_empty = import_rate(empty, batch, last, options.import_batch, log)
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
    ("+vectors empty /s", lambda f: f"{f.vectors_empty:,.0f}"),
    ("+vectors at size /s", lambda f: f"{f.vectors_full:,.0f}"),
    ("+vectors at size / empty", lambda f: f"{f.vectors_full / f.vectors_empty:.2f}"),
]

GROWTH = [
    ("rebuild s", lambda f: f.rebuild_s),
    ("recall p50", lambda f: f.p50),
    ("recall p95", lambda f: f.p95),
    ("owner RSS", lambda f: f.rss_mb),
    ("import at size", lambda f: f.import_full),
    ("+vectors at size", lambda f: f.vectors_full),
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


# -- where the owner's memory goes ----------------------------------------------------------------


def rss_parts(pid: int | str = "self") -> dict[str, float]:
    """VmRSS and its anonymous / file-backed parts (MB) from /proc/<pid>/status."""
    parts = {}
    for row in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = row.partition(":")
        if name in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
            parts[name] = int(value.split()[0]) / 1024
    return parts


def where(root: Path, trace: bool, top: int, imports: int) -> None:
    """The owner's opening, step by step, in this process (as `Owner.start` and the first recall
    do it): RSS after each step and, with `trace`, the Python allocations each step left behind,
    grouped by file:line; then a bulk import through the library (`remember_many`, committed at
    once: no owner defers it here) and its vectors' save. Run in a fresh process (`--where-vault`)."""
    import tracemalloc

    from memvault.indexer.engine.store import MemoryStore
    from memvault.indexer.maintenance.derived import DerivedIndex
    from memvault.indexer.maintenance.generations import current_generation

    texts = Texts(DEFAULT_DATA)
    queries = texts.queries(51)
    steps: list[tuple[str, dict[str, float], object]] = []

    def step(name: str) -> None:
        steps.append((name, rss_parts(), tracemalloc.take_snapshot() if trace else None))

    if trace:
        tracemalloc.start(1)
    step("imports")
    store = MemoryStore.open(root, sync=False, engine=False)
    step("store open")
    store._semantic.provider().embed_query("warm up")
    step("embedder loaded")
    index = DerivedIndex.open_generation(current_generation(store.layout.index_dir))
    index.bm25.search("warm up", 10)
    step("BM25 + manifest open")
    store._engine.current = index  # the store's local engine serves this generation from here
    store._engine.seen(index)
    store._semantic.attach_serving(index)
    step("vectors loaded")
    store.recall(queries[0], limit=10)
    step("first recall")
    store.sync()
    step("after sync")
    for query in queries[1:]:
        store.recall(query, limit=10)
    step("after 50 recalls")
    rows = len(store._semantic._serving.vectors)
    at = IMPORT_DAY
    store.remember_many([{"text": texts.next(), "at": at + timedelta(minutes=10 * n)} for n in range(imports)])
    step(f"after remember_many({imports:,})")
    store._semantic.drain(600)
    store._semantic.save_serving()
    step("after their vectors, saved")
    store.close()
    print(f"vault {root}: {rows:,} vectors")
    print(
        "| step | VmRSS MB | RssAnon MB | RssFile MB | step's VmRSS growth MB |"
        + (" traced growth MB |" if trace else "")
    )
    print("|---|---:|---:|---:|---:|" + ("---:|" if trace else ""))
    previous = None
    for name, parts, snapshot in steps:
        grown = parts["VmRSS"] - previous[1]["VmRSS"] if previous else 0.0
        cells = [name, f"{parts['VmRSS']:.1f}", f"{parts['RssAnon']:.1f}", f"{parts['RssFile']:.1f}", f"{grown:+.1f}"]
        if trace:
            traced = 0.0
            if snapshot is not None and previous is not None and previous[2] is not None:
                traced = sum(d.size_diff for d in snapshot.compare_to(previous[2], "filename")) / 2**20
            cells.append(f"{traced:+.1f}")
        print("| " + " | ".join(cells) + " |")
        previous = (name, parts, snapshot)
    if not trace:
        return
    first = next(snapshot for name, _, snapshot in steps if name == "embedder loaded")
    last = steps[-1][2]
    print(f"\nPython allocations held after the embedder loaded, to the end: top {top} by file:line")
    print(f"(bytes per memory: over the {rows:,} memories the vault held when opened)")
    print("| site | MB | bytes per memory | blocks |")
    print("|---|---:|---:|---:|")
    for diff in last.compare_to(first, "lineno")[:top]:
        frame = diff.traceback[0]
        site = f"{_short(frame.filename)}:{frame.lineno}"
        print(f"| {site} | {diff.size_diff / 2**20:.1f} | {diff.size_diff / max(rows, 1):.0f} | {diff.count_diff:,} |")
    total = sum(d.size_diff for d in last.compare_to(first, "filename"))
    print(f"| all Python allocations | {total / 2**20:.1f} | {total / max(rows, 1):.0f} | |")


def _short(filename: str) -> str:
    for marker in ("/site-packages/", "/work/main/", "/lib/python3"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000", help="comma-separated vault sizes")
    parser.add_argument("--million", action="store_true", help="also measure 1,000,000 memories (long)")
    parser.add_argument("--import-batch", type=int, default=5000, help="lines per bulk import")
    parser.add_argument("--recalls", type=int, default=200, help="timed recalls per size (after a warm-up)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="LoCoMo JSON (read, never copied)")
    parser.add_argument("--tmp", type=Path, default=None, help="where the vaults are built (deleted after)")
    parser.add_argument("--where", type=int, default=0, metavar="SIZE", help="instead: where the owner's memory goes")
    parser.add_argument("--where-vault", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--trace", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--top", type=int, default=25, help="allocation sites shown by --where")
    options = parser.parse_args(argv)
    if options.where_vault is not None:
        where(options.where_vault, options.trace, options.top, options.import_batch)
        return ""
    if options.where:
        return where_at(options)
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


def where_at(options: argparse.Namespace) -> str:
    """Build a vault of `--where` memories, rebuild it, then open it as the owner would, twice, each
    in a fresh process: once for RSS alone, once under tracemalloc (which costs memory itself)."""
    texts = Texts(options.data)
    with tempfile.TemporaryDirectory(prefix="memvault-where-", dir=options.tmp) as tmp:
        root = new_vault(Path(tmp) / "vault")
        for start in range(0, options.where, 50_000):
            write_notes(root, texts, start, min(50_000, options.where - start))
        run([*MEMVAULT, "--vault", str(root), "rebuild", "--json"], Path(tmp) / "memvault.log")
        me = [sys.executable, "-m", "bench.bench_scale", "--where-vault", str(root), "--top", str(options.top),
              "--import-batch", str(options.import_batch)]  # fmt: skip
        for extra in ([], ["--trace"]):
            print("\n## " + ("under tracemalloc" if extra else "RSS alone"), flush=True)
            subprocess.run([*me, *extra], env=ENV, cwd=REPO, check=True)
    return ""


if __name__ == "__main__":
    main()
