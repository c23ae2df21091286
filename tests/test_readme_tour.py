"""The README's five-minute tour, run as written: both shell blocks, in bash, on today's date."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def tour_blocks() -> list[str]:
    text = (REPO / "README.md").read_text()
    section = text.split("## A five-minute tour", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    # the credential example is meant to fail; the tour proper is the first two blocks
    return blocks[:2]


@pytest.mark.slow
@pytest.mark.both_backends
def test_the_readme_tour_runs_as_written(tmp_path):
    from tests import postgres_helpers

    blocks = tour_blocks()
    assert len(blocks) == 2 and "memvault watch &" in blocks[1]
    script = "\n".join(blocks).replace("source .venv/bin/activate\n", "")
    if postgres_helpers.TEST_BACKEND == "postgres":  # the same tour with its index on the server (PG* variables)
        init = "memvault init ~/notes/agent-memory --time-zone Europe/Amsterdam\n"
        assert init in script
        script = script.replace(init, init.replace("\n", " --index postgres\n"))
    # wait for the owner the way a person would (by looking), not by racing it
    script = script.replace(
        "memvault engine status ",
        "until memvault engine status >/dev/null 2>&1; do sleep 0.2; done; memvault engine status ",
    )
    env = {
        **os.environ,
        "HOME": str(tmp_path),
        "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"],
    }
    env = {k: v for k, v in env.items() if not k.startswith("MEMVAULT_")}
    done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=tmp_path, capture_output=True,
                          text=True, env=env, timeout=600)  # fmt: skip
    try:
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
        assert "Traceback" not in done.stderr
        out = done.stdout
        assert re.search(r"added: daily/\d{4}-\d\d-\d\d\.md#\^m-56e9dbdc5e", out)
        assert re.search(r"duplicate: daily/\d{4}-\d\d-\d\d\.md#\^m-56e9dbdc5e", out)
        assert "1. Morgan chose blue as the deployment color." in out
        assert "1. Priya prefers async code reviews." in out
        assert "Deployed 2.4 to staging; smoke tests pass." in out  # the admitted turn, found through the owner
        assert "healthy" in out
    finally:
        subprocess.run([sys.executable, "-m", "memvault", "--vault", str(tmp_path / "notes/agent-memory"), "engine",
                        "stop", "--force"], capture_output=True, timeout=120, env=env)  # fmt: skip
