"""Handing memory a long job freed back to the system.

A rebuild parses every note and fills segment after segment; what it frees goes back to the
C allocator's free lists, not to the system, and the process's RSS stays at its high-water mark
while the serving vectors are loaded on top of it. `return_freed_memory` collects what Python
holds in cycles, then asks glibc (`malloc_trim`) to give its free pages back. Elsewhere (musl,
macOS) it only collects.
"""

import ctypes
import ctypes.util
import gc
import sys


def return_freed_memory() -> None:
    gc.collect()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def _malloc_trim():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
