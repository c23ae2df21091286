"""Change detection cost: the stat fast path with ctime and inode, beside the size+mtime check it
replaced and beside hashing every note, measured in the same run on the same vault.

    python -m bench.bench_change_detection [--memories 100000] [--per-file 100]

Prints figures; asserts nothing (speed is never a test). What it measures is `stale_paths` on an
unchanged vault (the sync every open and every search runs), which is where detection costs.
"""

import argparse
import hashlib
import os
import statistics
import tempfile
import time
from pathlib import Path

from bench.bench_watch import make_vault
from memvault.indexer.engine.store import MemoryStore
from memvault.indexer.maintenance.sync import needs_reading


def _timed(function, repeats: int) -> float:
    runs = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        runs.append(time.perf_counter() - started)
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--per-file", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        root = make_vault(Path(folder) / "v", args.memories, args.per_file)
        with MemoryStore.open(root) as store:
            index = store.writable_index()
            old = time.time_ns() - 10_000_000_000  # out of the racy window, as an old vault's files are
            for relpath in store.layout.note_relpaths():
                os.utime(root / relpath, ns=(old, old))
            store.sync()
            files = {p: s for p, s in index.manifest.files.items()}
            paths = [root / p for p in files]

            def size_and_mtime() -> None:
                for path, state in zip(paths, files.values(), strict=True):
                    info = os.stat(path, follow_symlinks=False)
                    _ = info.st_size != state.size or info.st_mtime_ns != state.mtime_ns

            def needs_reading_loop() -> None:
                for path, state in zip(paths, files.values(), strict=True):
                    _ = needs_reading(path, state)

            def stale_paths() -> None:
                assert index.stale_paths(store.layout) == []

            def hash_everything() -> None:
                for path in paths:
                    hashlib.sha256(path.read_bytes()).hexdigest()

            baseline = _timed(size_and_mtime, args.repeats)
            check = _timed(needs_reading_loop, args.repeats)
            current = _timed(stale_paths, args.repeats)
            hashed = _timed(hash_everything, args.repeats)
    print(f"{args.memories} memories in {len(paths)} notes, median of {args.repeats}:")
    print(f"  size+mtime stat loop (baseline)        {baseline * 1000:8.1f} ms")
    print(f"  needs_reading: size+mtime+ctime+inode  {check * 1000:8.1f} ms")
    print(f"  stale_paths (listing + row counts too) {current * 1000:8.1f} ms")
    print(f"  hashing every note (the alternative)   {hashed * 1000:8.1f} ms")


if __name__ == "__main__":
    main()
