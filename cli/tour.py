"""The README's first command: a two-minute tour on the fixture vault, offline, no server.

    python -m memvault.cli.tour [TARGET]

Copies fixtures/vault to TARGET (default: a new temp folder), then runs real memvault commands
against it, saying before each what to expect and printing what it shows. It starts no process
that outlives it, and it ends by saying where the vault is and how to remove it.
"""

import shlex
import shutil
import sys
import tempfile
from pathlib import Path

from click.testing import CliRunner

from memvault.cli.main import cli
from memvault.vault.config import default_config_data, render_config

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "vault"
FACT = "Morgan chose blue as the deployment color."
STEPS = [
    (["rebuild"], "the index built from the markdown alone: 37 files, about 170 memories"),
    (["remember", FACT], "added: daily/<today>.md#^m-… (today's note, in the vault's zone)"),
    (["remember", FACT], "duplicate: the same id (remember is idempotent by content)"),
    (
        ["remember", "Standup moved to 10:00.", "--at", "2026-11-02T09:30:00+01:00"],
        "added: daily/2026-11-02.md#^m-… (an importer dates a memory with --at)",
    ),
    (
        ["search", "which deployment color did we pick?", "--limit", "3"],
        "the fact just remembered and the fixture's own 'blue … for Heron', each with its source",
    ),
    (["search", "Tokyo office move", "--limit", "3"], "notes from the fixture about the Tokyo office"),
    (["search", "東京", "--limit", "2"], "the same notes found by the Japanese name"),
    (
        ["search", "who is allergic to peanuts?", "--limit", "3", "--json"],
        "JSON hits: id, text, source, score, and `degraded: null` (nothing is missing)",
    ),
    (
        ["search", "What is Priya's phone number?", "--mode", "auto", "--json"],
        "auto mode (what a host may inject unasked): Priya's phone number, a direct fact, admitted",
    ),
    (
        ["search", "Where does Tomas live?", "--mode", "auto", "--json"],
        "auto mode abstains when no record states it directly: no hits and the reason",
    ),
    (["journal", "2026-11-01", "2026-11-03"], "what happened on those days, oldest first (the vault's zone)"),
    (
        ["health"],
        "the fixture's deliberate hand-edit problems (a merge conflict, a duplicate id), each with its meaning",
    ),
]


def main(argv: list[str]) -> int:
    if not FIXTURE.is_dir():
        print(f"fixtures/vault not found next to this checkout ({FIXTURE}): run the tour from a clone", file=sys.stderr)
        return 1
    target = Path(argv[0]) if argv else Path(tempfile.mkdtemp(prefix="memvault-tour-")) / "vault"
    if target.exists():
        print(f"{target} already exists: name a new folder, or run the tour without one", file=sys.stderr)
        return 1
    shutil.copytree(FIXTURE, target)
    # the fixture is a Lite vault (BM25 only); the tour shows the default Journal tier: hybrid
    # recall with the builtin embeddings, offline
    config = default_config_data(mode="journal", time_zone="Europe/Amsterdam")
    (target / "memvault.json").write_bytes(render_config(config))
    print(f"# a copy of the fixture vault, as a Journal vault: {target}\n")
    runner = CliRunner()
    added = None
    for step, expectation in STEPS:
        args = ["--vault", str(target), *step]
        print("$ memvault " + " ".join(shlex.quote(a) for a in args))
        print(f"# expect: {expectation}")
        result = runner.invoke(cli, args)
        print(result.output)
        if step[0] == "health":
            continue  # the fixture keeps broken notes on purpose: whatever health says is the point
        if result.exit_code != 0:
            return result.exit_code
        if step[0] == "remember" and added is None:
            added = result.output.split(": ", 1)[1].split("#")[0].strip()
    if added:
        print(f"# the fact is now a line in {target / added}:")
        print((target / added).read_text())
    print(
        f"# the tour's vault stays at {target}; "
        f"remove it with: rm -rf {shlex.quote(str(target.parent if not argv else target))}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
