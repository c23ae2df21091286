"""`memvault health` for a vault kept in git: does this clone run the merge drivers its
`.gitattributes` asks for? git versions the attributes but never clones the config that names
the drivers, so a fresh clone merges notes as plain text until `memvault git setup` (docs/backup.md).
Costs nothing for a vault whose attributes name no memvault driver (no git is run)."""

from collections.abc import Iterable

from memvault.indexer.maintenance.health_checks import WARNING, Finding, HealthContext
from memvault.vault.git_setup import ATTRIBUTES_FILE, drivers_missing, names_memvault_drivers, repository_of


def check_git_drivers(ctx: HealthContext) -> Iterable[Finding]:
    root = ctx.layout.root
    if not names_memvault_drivers(root) or repository_of(root) is None:
        return
    missing = drivers_missing(root)
    if missing:
        yield Finding(
            "git",
            WARNING,
            "git_drivers_missing",
            ATTRIBUTES_FILE,
            f"{ATTRIBUTES_FILE} names memvault's merge drivers but this clone's git config lacks "
            f"{', '.join(missing)}: a pull merges notes as plain text and may stop on a conflict",
            "memvault git setup (once per clone)",
        )
