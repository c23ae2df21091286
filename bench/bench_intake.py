"""Admissions per second, beside a plain fsynced file write measured in the same run.

    python bench/bench_intake.py [--count 300] [--rounds 5] [--dir PATH]

The baseline is the cheapest honest durable create of a file of the same size as one intake
record: open(O_CREAT|O_EXCL) → write → fsync → close → fsync the folder. An admission adds the
intake lock, the ledger catalog and shard checks, the duplicate lookups and the bound count
on top of that same durable create. Rounds alternate baseline and admission so disk drift hits
both; the medians and their ratio are printed (the target is under 3×). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from memvault.vault.clock import utc_now  # noqa: E402
from memvault.vault.config import default_config_data, render_config  # noqa: E402
from memvault.vault.init import init_vault  # noqa: E402
from memvault.vault.intake.admission import admit_turn  # noqa: E402
from memvault.vault.intake.files import IntakeDirs  # noqa: E402

ANSWER = "Deployed the fix for the login timeout, closed incident 4711 and told the on-call team."


def plain_writes(folder: Path, count: int, size: int, tag: str) -> float:
    folder.mkdir(parents=True, exist_ok=True)
    payload = b"x" * size
    started = time.perf_counter()
    for index in range(count):
        fd = os.open(folder / f"{tag}-{index}.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, payload)
        os.fsync(fd)
        os.close(fd)
        dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        os.fsync(dir_fd)
        os.close(dir_fd)
    return count / (time.perf_counter() - started)


def admissions(root: Path, count: int, tag: str) -> float:
    dirs = IntakeDirs(root)
    started = time.perf_counter()
    for index in range(count):
        result = admit_turn(
            dirs, run_id=f"bench-{tag}-{index}", answer=f"{ANSWER} ({index})",
            write_mode="append-host-summary", tier="lite", now=utc_now(),
        )  # fmt: skip
        if result.status != "admitted":
            raise SystemExit(f"admission failed: {result}")
    return count / (time.perf_counter() - started)


def record_size(root: Path) -> int:
    pending = root / ".capture-intake" / "pending"
    return max(p.stat().st_size for p in pending.iterdir())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=300, help="operations per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp folder)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as scratch:
        root = Path(scratch) / "vault"
        init_vault(root, render_config(default_config_data(mode="lite", time_zone="UTC")))
        admissions(root, 1, "warmup")
        size = record_size(root)
        plain, admitted = [], []
        for round_ in range(args.rounds):
            plain.append(plain_writes(Path(scratch) / "plain", args.count, size, f"r{round_}"))
            admitted.append(admissions(root, args.count, f"r{round_}"))
        # the active bound is 4,096 records; stay below it
        plain_rate, admit_rate = statistics.median(plain), statistics.median(admitted)
    print(f"record size: {size} bytes, {args.rounds} rounds x {args.count} operations")
    print(f"plain fsynced file create: {plain_rate:9.1f} /s  (rounds: {', '.join(f'{r:.0f}' for r in plain)})")
    print(f"intake admissions:         {admit_rate:9.1f} /s  (rounds: {', '.join(f'{r:.0f}' for r in admitted)})")
    print(f"cost ratio (plain / admission): {plain_rate / admit_rate:.2f}x  (target: under 3x)")


if __name__ == "__main__":
    main()
