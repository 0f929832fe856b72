"""How a failure reaches the person who ran the program: one block, their own frames.

An exception that escapes a program is printed by ``sys.excepthook``. Python's own hook shows
every frame, and a user's exception in a vertex callback travels through the scheduler, the
event loop and the computation handle: 33 to 69 lines, of which the user wrote a handful.
`install` (called when a computation starts) wraps the hook so that, for what the runtime
raises, the person sees:

- a `VertexError` as one traceback of *their* frames — where the program was (its ``with``
  or ``await`` line), then the callback's own frames — ending with the error's line, which
  names the stage, worker, callback, time and their exception;
- any other `TimelyError`, and a KeyboardInterrupt that came through the runtime, with their
  frames only (the runtime's, the event loop's and the launcher's are left out);
- a `PeerError` (another process failed, or was lost) as its one line — and, in a process that
  ``timely run`` started on this machine, not at all: the launcher's summary names the process
  that failed first and how, and that process prints its own error. Likewise a
  KeyboardInterrupt there: the launcher prints one line for the whole run.

``TIMELY_DEBUG=1`` (what ``timely run --debug`` sets) gives back Python's full printing.
Anything else goes to the hook that was there before, unchanged; so does everything when
formatting fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

from ..errors import PeerError, TimelyError, VertexError
from .config import ENV_DEBUG, ENV_FAILURE_FILE, ENV_LAUNCHER, LAUNCHER_LOCAL

__all__ = ["format_failure", "install", "record_cause"]

Hook = Callable[[type[BaseException], BaseException, TracebackType | None], Any]


def _package_dir(module: Any) -> str | None:
    path = getattr(module, "__file__", None)
    return None if path is None else str(Path(path).resolve().parent) + os.sep


def _hidden_places() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Directories and files whose frames are the machinery, not the program: timely itself, the
    event loop (asyncio, uvloop), anyio's task groups, contextlib's wrappers, ``python -m``."""
    dirs = [str(Path(__file__).resolve().parent.parent) + os.sep, _package_dir(asyncio)]
    for name in ("anyio", "uvloop"):
        with contextlib.suppress(ImportError):
            dirs.append(_package_dir(__import__(name)))
    files = [str(Path(contextlib.__file__).resolve()), "<frozen runpy>"]
    with contextlib.suppress(ImportError):
        import runpy

        files.append(str(Path(runpy.__file__).resolve()))
    return tuple(d for d in dirs if d), tuple(files)


_DIRS, _FILES = _hidden_places()


def _theirs(filename: str) -> bool:
    """Whether a frame in ``filename`` belongs to the program (or a library it uses) rather than
    to timely's runtime and the machinery under it."""
    if filename in _FILES:
        return False
    with contextlib.suppress(OSError, ValueError):
        filename = str(Path(filename).resolve())
    return filename not in _FILES and not filename.startswith(_DIRS)


def _their_frames(stack: Iterable[traceback.FrameSummary]) -> list[traceback.FrameSummary]:
    return [frame for frame in stack if _theirs(frame.filename)]


def _launched_here() -> bool:
    return os.environ.get(ENV_LAUNCHER) == LAUNCHER_LOCAL


def _debug() -> bool:
    return os.environ.get(ENV_DEBUG, "").strip().lower() not in ("", "0", "false", "no")


def _through_the_runtime(exc: BaseException) -> bool:
    return any(not _theirs(frame.filename) for frame in traceback.extract_tb(exc.__traceback__))


def format_failure(exc: BaseException) -> str | None:
    """The text for an uncaught ``exc``: ``""`` to print nothing, None when it is not one of the
    runtime's failures (Python's own printing applies)."""
    if isinstance(exc, PeerError):
        return "" if _launched_here() else "".join(traceback.format_exception_only(type(exc), exc))
    if isinstance(exc, KeyboardInterrupt):
        if _launched_here():
            return ""
        if not _through_the_runtime(exc):
            return None
    elif not isinstance(exc, TimelyError):
        return None
    shown = traceback.TracebackException.from_exception(exc)
    frames = _their_frames(shown.stack)
    hidden = len(shown.stack) - len(frames)
    if isinstance(exc, VertexError) and shown.__cause__ is not None:
        # One story: the program's frames, then the callback's; the cause's own line is inside
        # the VertexError's message. What caused the user's exception, if anything, stays.
        inner = shown.__cause__
        kept = _their_frames(inner.stack)
        hidden += len(inner.stack) - len(kept)
        frames += kept
        shown.__cause__ = inner.__cause__
        shown.__context__ = inner.__context__
        shown.__suppress_context__ = inner.__suppress_context__
    shown.stack = traceback.StackSummary.from_list(frames)
    for link in _chain(shown):
        kept = _their_frames(link.stack)
        hidden += len(link.stack) - len(kept)
        link.stack = traceback.StackSummary.from_list(kept)
    text = "".join(shown.format())
    if hidden:
        text += f"({ENV_DEBUG}=1, or timely run --debug, shows the runtime's frames too)\n"
    return text


def _chain(shown: traceback.TracebackException) -> list[traceback.TracebackException]:
    """The exceptions ``shown`` was caused by, or raised while handling."""
    found: list[traceback.TracebackException] = []
    link = shown
    while True:
        nxt = link.__cause__ or (None if link.__suppress_context__ else link.__context__)
        if nxt is None or any(nxt is seen for seen in found):
            return found
        found.append(nxt)
        link = nxt


def record_cause(exc: BaseException) -> None:
    """Tell the launcher, if one asked (`ENV_FAILURE_FILE`), whether this process's computation
    failed because of a peer (a `PeerError`) or on its own. A process that fails on its own error
    may exit after the peers that its error frame ended; without this the launcher, which sees
    only exit times, would name one of them as the first failure."""
    path = os.environ.get(ENV_FAILURE_FILE)
    if not path:
        return
    with contextlib.suppress(OSError):
        Path(path).write_text("peer" if isinstance(exc, PeerError) else "own")


def install() -> None:
    """Make the runtime's failures print as described above (once per process; a hook
    installed later by the program wins)."""
    previous = sys.excepthook
    if getattr(previous, "_timely", False):
        return

    def hook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> Any:
        text = None
        if not _debug():
            try:
                text = format_failure(exc)
            except Exception:  # never hide a failure behind a bug in formatting it
                text = None
        if text is None:
            return previous(kind, exc, tb)
        if text:
            sys.stderr.write(text)
            sys.stderr.flush()
        return None

    hook._timely = True  # type: ignore[attr-defined]
    sys.excepthook = hook
