"""The first compiler error of a failed Triton compilation, as one line that names what went wrong.

Triton wraps an error of its front end in a ``CompilationError`` whose text is
the kernel source around the failing line; the cause (say, an ``AttributeError``
of the backend's options) is chained below it. A failing external tool
(``ptxas``, ``triton-adapter-opt``) raises with its stderr. The line reported
is the innermost cause, with the source position of the outermost error.
"""
from __future__ import annotations

import re
import subprocess

ERROR_WORDS = re.compile(r"error|Error|failed|assert|Assert")


def _root_cause(exc: BaseException) -> BaseException:
    seen = set()
    while id(exc) not in seen and (exc.__cause__ or exc.__context__) is not None:
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return exc


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        if ERROR_WORDS.search(line) and not line.startswith("^"):
            return line
    return lines[0] if lines else ""


def first_error(exc: BaseException, limit: int = 300) -> str:
    """One line: the innermost error (an external tool's stderr line), with 'at L:C' of a Triton source error."""
    root = _root_cause(exc)
    if isinstance(root, subprocess.CalledProcessError) and not root.stderr:
        root = exc  # the tool's log went to a file that the outer error quotes (Triton's ptxas step)
    if isinstance(root, subprocess.CalledProcessError):
        stderr = root.stderr.decode(errors="replace") if isinstance(root.stderr, bytes) else (root.stderr or "")
        tool = root.cmd[0].rsplit("/", 1)[-1] if isinstance(root.cmd, (list, tuple)) and root.cmd else "tool"
        line = f"{tool}: {_first_line(stderr) or root}"
    else:
        line = f"{type(root).__name__}: {_first_line(str(root))}".rstrip(": ")
    where = re.match(r"at (\d+:\d+):", str(exc).strip())
    if where and root is not exc:
        line += f" (at {where.group(1)} of the kernel source)"
    return line[:limit]
