"""The README's first command: a two-minute tour on the fixture vault, offline, no server.

    python -m memvault.cli.tour [TARGET]

Copies fixtures/vault to TARGET (default: a new temp folder), then runs real memvault commands
against it and prints what each one shows.
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
STEPS = [
    ["rebuild"],
    ["remember", "Morgan chose blue as the deployment color.", "--at", "2026-11-30T14:03:00+01:00"],
    ["remember", "Morgan chose blue as the deployment color."],
    ["search", "which deployment color did we pick?", "--limit", "3"],
    ["search", "Tokyo office move", "--limit", "3"],
    ["search", "東京", "--limit", "2"],
    ["search", "who is allergic to peanuts?", "--limit", "3", "--json"],
    ["search", "What is Priya's phone number?", "--mode", "auto", "--json"],
    ["search", "Where does Tomas live?", "--mode", "auto", "--json"],
    ["health"],
]


def main(argv: list[str]) -> int:
    if not FIXTURE.is_dir():
        print(f"fixtures/vault not found next to this checkout ({FIXTURE})", file=sys.stderr)
        return 1
    target = Path(argv[0]) if argv else Path(tempfile.mkdtemp(prefix="memvault-tour-")) / "vault"
    shutil.copytree(FIXTURE, target)
    # the fixture is a Lite vault (BM25 only); the tour shows the default Journal tier: hybrid
    # recall with the builtin embeddings, offline
    config = default_config_data(mode="journal", time_zone="Europe/Amsterdam")
    (target / "memvault.json").write_bytes(render_config(config))
    print(f"# a copy of the fixture vault, as a Journal vault: {target}\n")
    runner = CliRunner()
    for step in STEPS:
        args = ["--vault", str(target), *step]
        print("$ memvault " + " ".join(shlex.quote(a) for a in args))
        result = runner.invoke(cli, args)
        print(result.output)
        if result.exit_code != 0:
            return result.exit_code
    print(f"# the fact is now a line in {target / 'daily' / '2026-11-30.md'}:")
    print((target / "daily" / "2026-11-30.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
