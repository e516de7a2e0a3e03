"""A small file system of the suite's own under Postgres's data directory: a
size-limited tmpfs mounted where `up` keeps it, so that a scenario can fill it.
Mounting needs root (CAP_SYS_ADMIN); without it the disk-full row fails and says so."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

# Room for a whole run's data and WAL; only what is written takes memory.
TMPFS_MB = 2048


def mount_tmpfs(path: Path, megabytes: int = TMPFS_MB) -> str:
    """Mount a tmpfs of `megabytes` at `path` (created): "" when mounted, else why not."""
    if os.geteuid() != 0:
        return "mounting a tmpfs for Postgres's data needs root (run `make chaos` as root)"
    path.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        [_tool("mount"), "-t", "tmpfs", "-o", f"size={megabytes}m,mode=0700", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        return f"mount -t tmpfs failed: {result.stderr.strip()[:200]}"
    return ""


def unmount(path: Path) -> None:
    # Lazy: a process of the stack killed a moment ago may still hold a file.
    subprocess.run([_tool("umount"), "-l", str(path)], capture_output=True, check=False)


def _tool(name: str) -> str:
    return shutil.which(name) or f"/usr/bin/{name}"


def free_bytes(path: Path) -> int:
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


def fill(path: Path, filler: Path) -> int:
    """Take every free byte of `path`'s file system with `filler`: the bytes taken."""
    taken = 0
    with open(filler, "wb") as f:
        chunk = free_bytes(path)
        while chunk >= 4096:
            try:
                os.posix_fallocate(f.fileno(), taken, chunk)
                taken += chunk
            except OSError:
                chunk //= 2  # what is left is less: take it in smaller pieces
            chunk = min(chunk, free_bytes(path)) if free_bytes(path) else 0
    return taken
