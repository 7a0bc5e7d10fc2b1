"""A data directory and what is in it belong to the sidecar's user alone: memory text is private.

RocksDB, usearch and the snapshot writer each create their own files, now and
later (new WAL and SST files, index saves), so only the process's umask reaches
all of them; the directory itself is made 0700 as well, which also hides
files an older version left readable.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

log = logging.getLogger(__name__)

PRIVATE_UMASK = 0o077
"""New files 0600, new folders 0700."""
PRIVATE_DIRECTORY_MODE = 0o700
"""A data directory's mode when the sidecar creates it."""


def restrict_new_files() -> None:
    """Make every file and folder this process creates from now on private to its user (a process-wide umask)."""
    os.umask(PRIVATE_UMASK)


def private_directory(path: Path) -> None:
    """Create ``path`` 0700 (with any missing parents); an existing one other users may enter is made 0700."""
    path.mkdir(mode=PRIVATE_DIRECTORY_MODE, parents=True, exist_ok=True)
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & PRIVATE_UMASK:
        log.warning("data directory %s was mode %o, open to other users: made %o", path, mode, mode & ~PRIVATE_UMASK)
        os.chmod(path, mode & ~PRIVATE_UMASK)
