"""One family of typed errors. Library code raises these; only cli/ turns them into exit codes.

Every message names the thing that is wrong and the fix, so an operator can act on it directly.
"""


class VaultError(Exception):
    """Base of every error memvault raises on purpose."""

    #: short machine-readable category, used by `--json` output and the MCP server
    code = "vault_error"


class NotAVault(VaultError):
    code = "not_a_vault"


class InvalidConfig(VaultError):
    code = "invalid_config"


class UnsafePath(VaultError):
    """A path escapes the vault, is a symlink, or has unsafe ownership/mode."""

    code = "unsafe_path"


class VaultLocked(VaultError):
    code = "vault_locked"


class Conflict(VaultError):
    """A compare-and-swap saw different bytes than it expected, or an id was reused with other bytes."""

    code = "conflict"


class InvalidRecord(VaultError):
    """A record, note or model output is malformed."""

    code = "invalid_record"


class CredentialRefused(VaultError):
    """Text carries something that looks like a secret; nothing was written."""

    code = "credential_refused"


class ProviderUnavailable(VaultError):
    """An embedding or chat provider failed, timed out, or answered malformed data."""

    code = "provider_unavailable"


class IndexUnavailable(VaultError):
    """The derived index is missing, corrupt, or built for another schema; a rebuild fixes it."""

    code = "index_unavailable"


class StorageError(VaultError, OSError):
    """The file system refused a write (read-only, full, no permission); nothing was half-written.

    Also an OSError, so code that handles the file system's errors keeps handling these."""

    code = "io_error"


class ReadOnlyVault(StorageError):
    """The vault is on a read-only file system: reads work, writes are refused."""

    code = "read_only"


class StorageFull(StorageError):
    """No space (or quota) left on the device that holds the vault."""

    code = "disk_full"


class StoragePermission(StorageError):
    """This user may not write a file or folder of the vault."""

    code = "permission_denied"
