"""Writing result files so that a reader never sees half of one.

Used by the command line (releases, centre tables) and by the evaluation tooling
(benchmark JSON): every output is written to a temporary file beside its target and
renamed over it, so a crash, a full disk or Ctrl-C leaves either the old file or the
new one, never a truncated release.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from typing import IO, Any

__all__ = ["write_atomically", "write_json"]


def write_atomically(path: str | os.PathLike, write: Callable[[IO[str]], Any]) -> None:
    """Call ``write(file)`` on a temporary text file beside ``path``, then rename it to ``path``.

    Readers see either no file or the complete one; on any error the temporary
    file is removed and an existing ``path`` is left as it was.
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", newline="") as file:
            write(file)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)  # mkstemp's 0600 -> what open() would have given
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def write_json(path: str | os.PathLike, document: Any, indent: int = 2) -> None:
    """Write ``document`` as JSON to ``path`` atomically (:func:`write_atomically`)."""
    text = json.dumps(document, indent=indent) + "\n"
    write_atomically(path, lambda file: file.write(text))
