"""Synthetic vaults for benchmarks: N memories spread over days, as memvault itself writes them."""

import random
from datetime import date, timedelta
from pathlib import Path

from memvault.vault.config import default_config_data, render_config
from memvault.vault.ids import memory_id
from memvault.vault.init import init_vault
from memvault.vault.note import format_bullet, new_note_text

SUBJECTS = ["Morgan", "Priya", "Sam", "Lena", "Tomas", "the team", "Acme", "the billing service", "Heron", "the CI"]
VERBS = ["chose", "moved", "fixed", "reviewed", "planned", "postponed", "deployed", "measured", "documented", "dropped"]
OBJECTS = [
    "the deployment color",
    "the standup time",
    "the cache warmer",
    "the staging cluster",
    "the login page",
    "the quarterly roadmap",
    "the export command",
    "the search backend",
    "the release notes",
    "the offsite venue",
    "the database migration",
    "the on-call rota",
    "the feature flags",
    "the latency budget",
    "the SSO rollout",
]
DETAILS = [
    "after the retro",
    "for release {n}",
    "because of incident {n}",
    "with help from {s}",
    "on day {n}",
    "in sprint {n}",
]


def sentence(rng: random.Random, n: int) -> str:
    detail = rng.choice(DETAILS).format(n=rng.randint(1, 500), s=rng.choice(SUBJECTS))
    return f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} {detail} (note {n})."


def make_vault(root: Path, memories: int, per_day: int = 100, mode: str = "lite", seed: int = 1) -> Path:
    data = default_config_data(mode=mode, time_zone="Europe/Amsterdam")
    init_vault(root, render_config(data))
    return write_memories(root, memories, per_day, seed)


def write_memories(root: Path, memories: int, per_day: int = 100, seed: int = 1) -> Path:
    """`memories` generated bullets in daily notes from 2020-01-01 on, into an existing vault."""
    rng = random.Random(seed)
    start = date(2020, 1, 1)
    written = 0
    day = 0
    while written < memories:
        lines = [new_note_text((start + timedelta(days=day)).isoformat())]
        for k in range(min(per_day, memories - written)):
            text = sentence(rng, written)
            hh, mm = divmod(8 * 60 + k * 5 % (14 * 60), 60)
            lines.append(format_bullet(text, memory_id(text), f"{hh:02d}:{mm:02d}"))
            written += 1
        (root / "daily" / f"{start + timedelta(days=day)}.md").write_text("".join(lines))
        day += 1
    return root
