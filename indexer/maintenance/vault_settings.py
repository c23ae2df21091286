"""The settings agents on other machines read a vault with (docs/team.md): its write mode, tier
and time zone, and the years its `daily/` keeps in `YYYY/` folders. Its owner registers them at
its start (`indexer/team/drain.py`); every build of its index on a server records them too
(`ServerGenerations.swap_in`), so a vault built by anyone answers remote recall."""

from pathlib import Path

from memvault.vault.layout import DAILY


def owner_settings(config, root=None) -> dict:
    """What clients admit, remember and recall with: the vault's write mode, tier and time zone,
    and the years its `daily/` keeps in `YYYY/` folders (where a new daily note goes: vault/layout.py)."""
    memory = config.memory
    settings = {"writeMode": memory.write_mode, "tier": memory.mode, "timeZone": memory.time_zone}
    if root is not None:
        settings["nestedYears"] = nested_years(root)
    return settings


def nested_years(root) -> list[int]:
    """The years `daily/` holds as `daily/YYYY/` folders (VaultLayout.note_relpath's rule)."""
    folder = Path(root) / DAILY
    try:
        return sorted(int(entry.name) for entry in folder.iterdir()
                      if len(entry.name) == 4 and entry.name.isdigit() and entry.is_dir()
                      and not entry.is_symlink())  # fmt: skip
    except OSError:
        return []
