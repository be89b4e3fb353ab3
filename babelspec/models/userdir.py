"""Where converted models and built tokenizers live: the user's cache, never the repository."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import platformdirs

from babelspec.fileio import fsync_dir

CACHE_ENV = "BABELSPEC_CACHE"


def cache_dir() -> Path:
    """``$BABELSPEC_CACHE`` if set, else the platform's user cache dir for babelspec."""
    env = os.environ.get(CACHE_ENV)
    path = Path(env) if env else Path(platformdirs.user_cache_dir("babelspec"))
    path.mkdir(parents=True, exist_ok=True)
    return path


COMPLETE_MARKER = "babelspec-complete.json"


@contextmanager
def staging_dir(final: Path) -> Iterator[Path]:
    """A temporary directory next to ``final``; on success it replaces ``final`` atomically.

    A crash leaves only a ``.tmp-*`` directory behind (cleaned up here on errors), never a
    half-written ``final``.
    """
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=final.parent))
    try:
        yield tmp
        _fsync_tree(tmp)
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; the cache entry is ordinary data
        try:
            os.replace(tmp, final)
        except OSError:
            if not final.is_dir():
                raise
            shutil.rmtree(tmp, ignore_errors=True)  # another process finished first: keep theirs
            return
        fsync_dir(final.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _fsync_tree(root: Path) -> None:
    for path in root.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    # One builder at a time per cache entry, so concurrent processes do not convert twice.
    try:
        import fcntl
    except ImportError:  # not POSIX: the atomic rename alone keeps the cache consistent
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def cached_build(name: str, build: Callable[[Path], None]) -> Path:
    """Return ``cache_dir()/name``, running ``build(tmp_dir)`` once to fill it if missing.

    ``build`` must write ``COMPLETE_MARKER`` into the directory last; an entry without it is
    treated as foreign or broken and rebuilt.
    """
    final = cache_dir() / name
    if _complete(final):
        return final
    with _file_lock(final.parent / f".{final.name}.lock"):
        if _complete(final):  # built by another process while we waited
            return final
        if final.exists():  # not ours to trust (no completion marker): set aside, rebuild
            os.replace(final, final.parent / f".broken-{final.name}-{os.getpid()}")
        with staging_dir(final) as tmp:
            build(tmp)
    return final


def _complete(path: Path) -> bool:
    return (path / COMPLETE_MARKER).is_file()


