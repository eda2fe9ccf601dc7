"""Fingerprints of a task's source files: what the prepared cache is keyed on.

A key made of sizes and modification times misses every copy that keeps them (``cp -p``,
``rsync -a``, ``tar -x``) and every in-place rewrite that restores them. Two stronger keys:

- ``content``: each file's sha256, memoised under ``hashes/`` in the cache root by the file's
  *stamp* (size, mtime, inode, ctime). A copy gets a new inode and any write moves the ctime,
  which no user can set back, so a memo entry whose stamp still matches describes the same
  bytes and the file is not read again; one that differs in any field is re-hashed.
- ``stamp``: the stamp itself, for files that must stay unopened before the final evaluation
  (test splits, and image folders shared by every split): it changes on the same events.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from sptune.tasks.cache import cache_root, digest

_CHUNK = 1 << 20

# One memo file per source folder: file name -> [size, mtime_ns, inode, ctime_ns, sha256].
Memo = dict[str, list]


def file_sha256(path: Path) -> str:
    """sha256 of the file's bytes, read in 1 MiB chunks."""
    sha = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            sha.update(chunk)
    return sha.hexdigest()


def _stamp(stat: os.stat_result) -> list[int]:
    return [stat.st_size, stat.st_mtime_ns, stat.st_ino, stat.st_ctime_ns]


def _memo_path(folder: Path) -> Path:
    return cache_root() / "hashes" / f"{digest(str(folder))}.json"


def _read_memo(folder: Path) -> Memo:
    try:
        memo = json.loads(_memo_path(folder).read_text())
    except (OSError, ValueError):
        return {}
    return memo if isinstance(memo, dict) else {}


def _write_memo(folder: Path, memo: Memo) -> None:
    # Only a speed-up: a read-only or full cache disk costs re-hashing next time, never a failed load.
    target = _memo_path(folder)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".memo-", dir=target.parent)
        with os.fdopen(fd, "w") as handle:
            json.dump(memo, handle)
        os.replace(tmp, target)
    except OSError:
        return


def _hash_folder_files(folder: Path, names: Iterable[str]) -> dict[str, str]:
    """name -> sha256 for ``names`` in ``folder``, re-reading only files whose stamp moved."""
    memo, changed, out = _read_memo(folder), False, {}
    for name in names:
        stamp = _stamp(os.stat(folder / name))
        known = memo.get(name)
        if known is None or known[:4] != stamp:
            known = [*stamp, file_sha256(folder / name)]
            memo[name], changed = known, True
        out[name] = known[4]
    if changed:
        _write_memo(folder, memo)
    return out


def stamp(path: Path) -> list[int]:
    """The file's size, mtime, inode and ctime: moved by every copy and every write, read by a stat alone."""
    return _stamp(os.stat(path))


def stamps_fingerprint(paths: Iterable[Path]) -> list[tuple[str, list[int]]]:
    """(resolved path, stamp) of each file, in the order given; no file is opened."""
    return [(str(Path(p).resolve()), stamp(Path(p))) for p in paths]


def content_fingerprint(paths: Iterable[Path]) -> list[tuple[str, str]]:
    """(resolved path, sha256) of each file, in the order given."""
    resolved = [Path(p).resolve() for p in paths]
    by_folder: dict[Path, list[str]] = {}
    for path in resolved:
        by_folder.setdefault(path.parent, []).append(path.name)
    hashes = {
        folder / name: sha
        for folder, names in by_folder.items()
        for name, sha in _hash_folder_files(folder, names).items()
    }
    return [(str(path), hashes[path]) for path in resolved]


def tree_fingerprint(root: Path, content: bool = True) -> str:
    """One sha256 over every file under ``root``: their relative paths and contents (``content``) or stamps.

    A file added, removed (e.g. an image missing after an interrupted extraction and put back
    later), renamed or rewritten changes it; hidden files (editor and memo droppings) are ignored.
    """
    root = Path(root).resolve()
    sha = hashlib.sha256()
    for folder, names in _walk(root):
        relative = folder.relative_to(root).as_posix()
        if content:
            marks = _hash_folder_files(folder, names)
        else:
            marks = {name: ",".join(map(str, stamp(folder / name))) for name in names}
        for name in names:
            sha.update(f"{relative}/{name}\0{marks[name]}\n".encode())
    return sha.hexdigest()


def _walk(root: Path) -> list[tuple[Path, list[str]]]:
    out = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        out.append((Path(folder), sorted(f for f in files if not f.startswith("."))))
    return out
