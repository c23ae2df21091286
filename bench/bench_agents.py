"""Many agents, one owner: N client processes against a running `memvault serve` (issue 26).

    python -m bench.bench_agents [--clients 8] [--seconds 30] [--memories 2000] [--saves 0,1,15] [--crash]
                                 [--day-lines 0] [--edit end|top]

Each client process holds `MemoryStore.open(V)` (a RemoteStore) and loops 40% remember, 30%
admit, 30% search. Every search asks for the unique word of a memory already acknowledged, by
this client or (half the time) another one, and counts a read-your-writes miss when it is not in
the hits. A person's editor saves today's note at the given rates (temp file + rename, as editors
do, from a buffer read just before: a save may drop a line memvault appended, which the owner
puts back). Figures are printed for one client first (the baseline of the same run), then for N.
`--crash` SIGKILLs the owner mid-run, starts a new one, and checks that every acknowledged
remember and admitted turn is in the notes exactly once and every remember is found.
`--edit top` has the person add a line at the top on every save instead (every memory moves
down a line). `--day-lines N` starts today's note with N memories, so the saves are measured on a day's note of
a known size (otherwise it is as big as the earlier phases made it, which moves with the machine).

Targets (issue 26): 8 clients ≥ 200 operations/s in total; p95 ≤ 100 ms for remember and search,
≤ 50 ms for admit; with saves at 1 Hz remember p50 ≤ 30 ms; 0 read-your-writes misses; projection
p95 ≤ 1 s. Asserts nothing: it prints.
"""

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

from bench.bench_engine import ENV, MEMVAULT, REPO, percentile
from bench.generate import make_vault, sentence
from memvault.vault.ids import memory_id
from memvault.vault.note import format_bullet, new_note_text

OPERATIONS = ("remember", "admit", "search")
MIX = (0.4, 0.3, 0.3)


# --- a client process ---------------------------------------------------------------------------


def client_main(root: Path, seconds: float, name: str, out: Path, shared: Path) -> None:
    from memvault import MemoryStore
    from memvault.indexer.engine.client import find_owner
    from memvault.indexer.engine.remote import RemoteStore

    rng = random.Random(name)
    store = MemoryStore.open(root)
    assert isinstance(store, RemoteStore), "the bench needs a running owner"
    samples = {op: [] for op in OPERATIONS}
    misses, errors, remembered, admitted, missed, acknowledged = 0, 0, [], [], [], {}
    out.with_suffix(".ready").touch()  # started and connected: the parent starts every client at once
    go = out.parent / f"go-{out.name.rsplit('-', 1)[0]}"
    while not go.exists():
        time.sleep(0.01)
    deadline = time.monotonic() + seconds
    n = 0
    while time.monotonic() < deadline:
        n += 1
        op = rng.choices(OPERATIONS, MIX)[0]
        word = f"{name}w{n}"
        started = time.perf_counter()
        try:
            if op == "remember":
                store.remember(f"Agent {name} noted item {word} for the harbour log.")
                remembered.append(word)
                acknowledged[word] = time.time()
                with open(shared, "a") as log:  # after the acknowledgement: others may look for it now
                    log.write(f"{word} {acknowledged[word]:.6f}\n")
            elif op == "admit":
                result = store.persist_completed_turn(
                    f"{name}-run-{n}", f"Agent {name} finished turn {word} on the pier."
                )
                if result.status == "admitted":
                    admitted.append(word)
            else:
                found = _target(rng, remembered, shared, acknowledged)
                if found is None:
                    continue
                target, acknowledged_at = found
                result = store.recall(target, limit=10)
                if not any(target in hit.text for hit in result.hits):
                    misses += 1
                    missed.append(
                        {
                            "word": target,
                            "own": target in remembered,
                            "hits": len(result.hits),
                            "empty": result.empty_reason,
                            "degraded": result.degraded,
                            "ms since acknowledged": round((time.time() - acknowledged_at) * 1000),
                        }
                    )
        except Exception as exc:  # the crash variant: the owner went away; wait for the next one
            errors += 1
            print(f"{name}: {type(exc).__name__}: {str(exc)[:120]}", file=sys.stderr)
            while time.monotonic() < deadline:
                found = _owner(find_owner, root)
                if found is not None:
                    store = RemoteStore(root, found)
                    break
                time.sleep(0.1)
            continue
        samples[op].append((time.perf_counter() - started) * 1000)
    out.write_text(
        json.dumps(
            {
                "samples": samples,
                "misses": misses,
                "errors": errors,
                "missed": missed,
                "remembered": remembered,
                "admitted": admitted,
            }
        )
    )


def _owner(find_owner, root):
    try:
        return find_owner(root, timeout=1.0)
    except Exception:
        return None


def _target(rng: random.Random, own: list[str], shared: Path, acknowledged: dict) -> tuple[str, float] | None:
    """A word acknowledged already (this client's last, or another's of late) and when it was."""
    if rng.random() < 0.5 and own:
        return own[-1], acknowledged[own[-1]]
    try:
        with open(shared, "rb") as log:
            log.seek(0, os.SEEK_END)
            size = log.tell()
            log.seek(max(0, size - 4096))
            words = log.read().decode().split("\n")[1:-1]  # whole lines only
    except OSError:
        words = []
    if words:
        word, at = rng.choice(words[-50:]).split()
        return word, float(at)
    return (own[-1], acknowledged[own[-1]]) if own else None


# --- the person's editor ------------------------------------------------------------------------


#: where the person's editor writes: "end" moves their one scratch line below the lines memvault
#: appended; "top" adds a line of theirs above the day's memories on every save (moving them all)
EDIT = "end"


def editor(root: Path, hertz: float, stop: threading.Event, counts: dict) -> None:
    """Save today's note `hertz` times a second from a buffer read just before, with the person's
    own lines changed each time (temp file + rename, no fsync: as editors save)."""
    today = datetime.now(ZoneInfo("Europe/Amsterdam")).date().isoformat()
    path = root / "daily" / f"{today}.md"
    n = 0
    while not stop.wait(1.0 / hertz):
        try:
            lines = path.read_text().splitlines(keepends=True)
        except FileNotFoundError:
            continue
        n += 1
        if EDIT == "top":  # under the title: "# day" and a blank line
            lines = lines[:2] + [f"- 06:00 person top line {n}\n"] + lines[2:]
        else:
            lines = [line for line in lines if "person scratch" not in line] + [f"- 07:00 person scratch {n}\n"]
        temp = path.with_name(f".{path.name}.swp")
        temp.write_text("".join(lines))
        os.replace(temp, path)
        counts["saves"] = n


def start_todays_note(root: Path, memories: int) -> None:
    """Today's note (in the vault's zone, as the editor saves it) with `memories` generated lines."""
    today = datetime.now(ZoneInfo("Europe/Amsterdam")).date().isoformat()
    rng = random.Random(today)
    lines = [new_note_text(today)]
    for n in range(memories):
        text = sentence(rng, n)
        lines.append(format_bullet(text, memory_id(text), "07:00"))
    (root / "daily" / f"{today}.md").write_text("".join(lines))


# --- one phase ------------------------------------------------------------------------------------


class Owner:
    def __init__(self, root: Path):
        from memvault.indexer.engine.client import find_owner

        self.proc = subprocess.Popen(
            [*MEMVAULT, "--vault", str(root), "serve"],
            env=ENV,
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            found = _owner(find_owner, root)
            if found is not None and found.pid == self.proc.pid:
                return
            time.sleep(0.1)
        raise RuntimeError("the owner did not come up")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(120)


def projection_probe(root: Path, stop: threading.Event, samples: list[float]) -> None:
    """Once a second: admit a turn and time until its pending record is resolved (projected).
    Each turn's text is new (a repeated text is a duplicate: projected without a write)."""
    from memvault import MemoryStore
    from memvault.vault.intake.admission import intake_id_for

    store = MemoryStore.open(root)
    n = 0
    while not stop.wait(1.0):
        n += 1
        run_id = f"probe-{time.time_ns()}-{n}"
        started = time.perf_counter()
        try:
            result = store.persist_completed_turn(run_id, f"Probe turn {run_id} reached the harbour master.")
        except Exception:
            continue
        if result.status != "admitted":
            continue
        pending = root / ".capture-intake" / "pending" / intake_id_for(run_id)
        while pending.exists() and not stop.is_set() and time.perf_counter() - started < 30:
            time.sleep(0.01)
        if not pending.exists():
            samples.append((time.perf_counter() - started) * 1000)


def phase(root: Path, clients: int, seconds: float, hertz: float, work: Path, crash_after: float | None = None):
    shared = work / "acknowledged.log"
    outs = [work / f"client-{clients}-{hertz}-{k}.json" for k in range(clients)]
    stop, counts, projections = threading.Event(), {"saves": 0}, []
    threads = [threading.Thread(target=projection_probe, args=(root, stop, projections), daemon=True)]
    if hertz:
        threads.append(threading.Thread(target=editor, args=(root, hertz, stop, counts), daemon=True))
    procs = [subprocess.Popen([sys.executable, "-m", "bench.bench_agents", "--client", str(root), str(seconds),
                               f"c{clients}h{int(hertz)}n{k}", str(out), str(shared)], env=ENV, cwd=REPO,
                              stderr=subprocess.DEVNULL)
             for k, out in enumerate(outs)]  # fmt: skip
    while not all(out.with_suffix(".ready").exists() for out in outs):  # Python start-up is not measured
        if any(proc.poll() is not None for proc in procs):
            raise RuntimeError("a client process died before it started")
        time.sleep(0.05)
    (work / f"go-{outs[0].name.rsplit('-', 1)[0]}").touch()
    for thread in threads:
        thread.start()
    started = time.monotonic()
    if crash_after is not None:
        time.sleep(crash_after)
        crash_after = OWNER.proc.pid
        OWNER.proc.send_signal(signal.SIGKILL)
        OWNER.proc.wait(60)
        restart()
    for proc in procs:
        proc.wait(seconds + 600)
    elapsed = min(time.monotonic() - started, seconds)  # the clients' own loop: the last call may run over
    stop.set()
    for thread in threads:
        thread.join(30)
    results = [json.loads(out.read_text()) for out in outs if out.exists()]
    return results, elapsed, counts["saves"], projections


OWNER: Owner | None = None


def restart() -> None:
    global OWNER
    OWNER = Owner(ROOT)


def report(label: str, results: list[dict], elapsed: float, saves: int, projections: list[float]) -> None:
    total = sum(len(r["samples"][op]) for r in results for op in OPERATIONS)
    misses = sum(r["misses"] for r in results)
    errors = sum(r["errors"] for r in results)
    print(
        f"{label}: {total / elapsed:.0f} operations/s in total over {elapsed:.1f} s; read-your-writes misses "
        f"{misses}; errors {errors}; editor saves {saves}"
    )
    for op in OPERATIONS:
        values = [v for r in results for v in r["samples"][op]]
        if values:
            print(
                f"  {op:<9} n={len(values):>5}  p50 {percentile(values, 0.5):7.1f} ms"
                f"  p95 {percentile(values, 0.95):7.1f} ms"
                f"  p99 {percentile(values, 0.99):7.1f} ms"
            )
    if projections:
        print(
            f"  admit → projected (probe, 1/s): n={len(projections)}  p50 {percentile(projections, 0.5):7.1f} ms"
            f"  p95 {percentile(projections, 0.95):7.1f} ms"
        )
    for miss in [m for r in results for m in r.get("missed", ())][:5]:
        print(f"  missed: {miss}; found when asked again after the phase: {_found_later(miss['word'])}")


def _found_later(word: str) -> bool:
    from memvault import MemoryStore

    return any(word in hit.text for hit in MemoryStore.open(ROOT).recall(word, limit=10).hits)


def verify_after_crash(root: Path, results: list[dict]) -> None:
    """Every acknowledged remember and admitted turn is in the notes exactly once, every remember found."""
    from memvault import MemoryStore
    from memvault.indexer.engine.client import find_owner

    deadline = time.monotonic() + 120
    while (root / ".capture-intake" / "pending").exists() and any(
        p for p in (root / ".capture-intake" / "pending").iterdir() if not p.name.startswith(".")
    ):
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
    text = "".join(p.read_text() for p in (root / "daily").rglob("*.md"))
    words = [w for r in results for w in r["remembered"]] + [w for r in results for w in r["admitted"]]
    wanted, counts = set(words), {}
    for token in text.split():
        if token in wanted:
            counts[token] = counts.get(token, 0) + 1
    wrong = [w for w in words if counts.get(w, 0) != 1]
    store = MemoryStore.open(root)
    assert find_owner(root) is not None
    unfound = [w for r in results for w in r["remembered"] if not any(w in h.text for h in store.recall(w).hits)]
    print(
        f"crash: {len(words)} acknowledged writes; not exactly once in the notes: {len(wrong)} {wrong[:5]}; "
        f"remembers not found by search: {len(unfound)} {unfound[:5]}"
    )


ROOT: Path


def main() -> None:
    global ROOT, EDIT
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--memories", type=int, default=2000)
    parser.add_argument("--saves", default="0,1,15", help="editor save rates to run, in Hz (0: none)")
    parser.add_argument("--crash", action="store_true", help="also run the SIGKILL variant")
    parser.add_argument("--day-lines", type=int, default=0, help="memories today's note starts with")
    parser.add_argument(
        "--edit",
        choices=("end", "top"),
        default="end",
        help="the person's saves: their line moved to the end, or a new line at the top",
    )
    args = parser.parse_args()
    EDIT = args.edit
    work = Path(tempfile.mkdtemp(prefix="memvault-agents-"))
    ROOT = make_vault(work / "v", args.memories, mode="journal")
    if args.day_lines:
        start_todays_note(ROOT, args.day_lines)
    subprocess.run([*MEMVAULT, "--vault", str(ROOT), "rebuild"], env=ENV, cwd=REPO, check=True, capture_output=True)
    today = f"; today's note starts with {args.day_lines} of them" if args.day_lines else ""
    print(
        f"vault: {args.memories + args.day_lines} memories{today} (Journal tier, builtin embeddings); "
        f"{os.cpu_count()} cores; measured on a shared, busy machine"
    )
    restart()
    try:
        report("1 client (baseline, same run)", *phase(ROOT, 1, args.seconds, 0.0, work))
        for hertz in [float(h) for h in args.saves.split(",")]:
            label = f"{args.clients} clients" + (f", editor saving at {hertz:g} Hz" if hertz else "")
            report(label, *phase(ROOT, args.clients, args.seconds, hertz, work))
        if args.crash:
            results, elapsed, saves, projections = phase(
                ROOT, args.clients, args.seconds, 0.0, work, crash_after=args.seconds / 2
            )
            report(
                f"{args.clients} clients, owner SIGKILLed after {args.seconds / 2:g} s and restarted",
                results,
                elapsed,
                saves,
                projections,
            )
            verify_after_crash(ROOT, results)
    finally:
        if OWNER is not None:
            OWNER.stop()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        client_main(Path(sys.argv[2]), float(sys.argv[3]), sys.argv[4], Path(sys.argv[5]), Path(sys.argv[6]))
    else:
        main()
