"""Reading and writing files safely: one bounded loader for every reader, one safe-write path for every writer.

Readers (``read_text``, ``load_yaml``, ``load_json``, ``read_csv_text``) check the size before reading, accept
UTF-8 with or without a byte-order mark and refuse other encodings with the byte offset, and parse YAML without
anchors or aliases (a few hundred bytes of nested aliases expand to 10^9 nodes: "billion laughs"). Every failure
is a ``SpecError`` that names the file. YAML goes through libyaml (PyYAML's C parser) when it is installed and
the document is plain (no anchor, alias, application tag or deep nesting, and it parses), its values built in one
pass over the parser's events (specs/efficiency.yaml: 1.3 ms, against 2.1 ms through ``yaml.load`` with
``CSafeLoader`` and 24 ms through the pure-Python loader); anything else goes to the pure-Python loader, which
decides and words every refusal (``parse_yaml``).

Writers (``write_text``, ``write_bytes``) never replace a file unless asked (``overwrite=True``; ``--force`` on
the command line), and then atomically: the text goes to a temporary file in the target folder, is fsynced, and
is hard-linked into place (``os.link`` fails atomically if the name exists, so of N racing writers exactly one
wins) or ``os.replace``-d over the old file. The temporary file is removed on any exit, SIGTERM and SIGINT
included, and stale ones of ours (``.NAME.wbtmp-PID-RAND`` of a dead process, or older than an hour) are swept
by the next write. Folders, FIFOs, devices and sockets are never replaced; a symlink, dangling or not, counts as
an existing file and is replaced itself, never written through; nothing is written inside the shipped ``specs/``
unless ``WORKBENCH_ALLOW_SPECS_WRITE=1`` (``allow_specs_write()``: the maintainers' refit scripts).
``check_output`` raises what a write would, so a command can refuse a bad ``--out`` before its long work.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import json
import os
import signal
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from workbench.errors import MISSING, SpecError, WorkbenchError, excerpt  # noqa: F401 - excerpt re-exported

MiB = 1024 * 1024
DEFAULT_MAX_BYTES = 8 * MiB  # a spec, recipe or Hugging Face config; the largest shipped spec is ~100 KB
TABLE_MAX_BYTES = 256 * MiB  # CSVs of measured rows, bench caches, traces
SPECS_WRITE_ENV = "WORKBENCH_ALLOW_SPECS_WRITE"  # "1": maintainers' refits may write into the shipped specs/
STALE_TEMP_S = 3600.0  # a temp file of ours older than this is swept even if its pid looks alive (pid reuse)
_TEMP_MARK = ".wbtmp-"


class InputFileError(SpecError):
    """A file could not be read as text of the expected kind: missing, a folder, too big, not UTF-8, unparseable."""

    def __init__(self, path: str | os.PathLike, problem: str, *, message: str | None = None):
        self.origin, self.field, self.value, self.expected = str(path), "<file>", MISSING, problem
        WorkbenchError.__init__(self, message or f"{path}: {problem}")


def _unreadable(path: str | os.PathLike, reason: str, what: str) -> InputFileError:
    problem = f"{reason} (expected a readable {what})"
    return InputFileError(path, problem, message=f"cannot read {path}: {problem}")


class OutputError(WorkbenchError):
    """A file could not be written where asked: a folder, a special file, a read-only folder, shipped data."""


class OutputExistsError(OutputError, FileExistsError):
    """The target exists and ``overwrite`` was not given (a ``FileExistsError`` too, for older callers)."""


# --- reading ---------------------------------------------------------------------------------------------------

def _size(n: int) -> str:
    return f"{n / MiB:g} MiB" if n >= MiB else f"{n} bytes"


def read_bytes(path: str | os.PathLike, *, what: str = "file", max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
    """The bytes of ``path``, refused before reading when over ``max_bytes`` (a bounded read for pipes)."""
    try:  # non-blocking open: a FIFO without a writer must not hang here
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise _unreadable(path, "no such file", "file") from None
    except NotADirectoryError:
        raise _unreadable(path, "a folder on this path is a file", what) from None
    except OSError as exc:
        raise _unreadable(path, exc.strerror or str(exc), what) from None
    info = os.fstat(fd)
    if stat.S_ISDIR(info.st_mode):
        os.close(fd)
        raise InputFileError(path, f"is a folder: expected a {what}")
    os.set_blocking(fd, True)
    with os.fdopen(fd, "rb") as handle:
        limit = f"over the {_size(max_bytes)} limit for a {what}: expected a smaller file"
        if stat.S_ISREG(info.st_mode) and info.st_size > max_bytes:
            raise InputFileError(path, f"{info.st_size} bytes is {limit}")
        try:
            data = handle.read(max_bytes + 1)
        except OSError as exc:
            raise _unreadable(path, exc.strerror or str(exc), what) from None
    if len(data) > max_bytes:
        raise InputFileError(path, f"more than {max_bytes} bytes is {limit}")
    return data


def decode_text(data: bytes, origin: str) -> str:
    """UTF-8 ``data`` as text, a leading byte-order mark dropped; other encodings refused with the byte offset."""
    skip = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        return data[skip:].decode("utf-8")
    except UnicodeDecodeError as exc:
        offset = skip + exc.start  # in the file, byte-order mark included
        line = data.count(b"\n", 0, offset) + 1
        raise InputFileError(origin, f"byte 0x{data[offset]:02x} at offset {offset} (line {line}) is not "
                                     "UTF-8: expected UTF-8 text (save the file as UTF-8)") from None


def read_text(path: str | os.PathLike, *, what: str = "file", max_bytes: int = DEFAULT_MAX_BYTES) -> str:
    """The UTF-8 text of ``path`` (with or without a byte-order mark), at most ``max_bytes`` long."""
    return decode_text(read_bytes(path, what=what, max_bytes=max_bytes), str(path))


def read_csv_text(path: str | os.PathLike, *, max_bytes: int = TABLE_MAX_BYTES) -> str:
    """A CSV file's text for ``csv``/``pandas``: the byte-order mark spreadsheets write is dropped."""
    return read_text(path, what="CSV file", max_bytes=max_bytes)


def read_stream_text(stream: Any, origin: str = "<stdin>", *, max_bytes: int = TABLE_MAX_BYTES) -> str:
    """The UTF-8 text of a binary stream (``sys.stdin.buffer``), read at most ``max_bytes`` long."""
    data = stream.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise InputFileError(origin, f"more than {_size(max_bytes)}: expected a smaller input")
    return decode_text(data, origin) if isinstance(data, bytes) else data.removeprefix("\ufeff")


class _AliasRefused(yaml.YAMLError):
    def __init__(self, mark: yaml.Mark | None):
        self.mark = mark


class NoAliasSafeLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses anchors and aliases (``&a``, ``*a``, ``<<: *a``) instead of expanding them."""

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise _AliasRefused(event.start_mark)
        return super().compose_node(parent, index)


def _where(mark: Any) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""


def _bounded(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


FAST_MAX_DEPTH = 64
"""Deepest nesting (mappings, sequences and the scalar at the bottom) the libyaml path takes. A deeper document
goes to the pure-Python loader, which refuses what is too deep (the shipped specs nest < 10)."""
_NOT_FAST = object()
_AWAITING_KEY = object()
_IN_SEQUENCE = object()
_YAML_TAG = "tag:yaml.org,2002:"
_STR_TAG = _YAML_TAG + "str"
_SCALAR_TAGS = frozenset(_YAML_TAG + name for name in ("null", "bool", "int", "float", "binary", "timestamp"))
"""The scalar tags besides ``str`` the libyaml path builds, with PyYAML's safe constructor for each; any other
(``<<`` merge keys, ``=`` value keys, an application's ``!tag``) goes to the pure-Python loader."""
_COLLECTION_TAGS = (None, "!", _YAML_TAG + "map", _YAML_TAG + "seq")
"""A mapping or sequence untagged, or tagged as the plain collection it is (``!!omap``, ``!!set``: pure Python)."""
_LibyamlParser = yaml.CSafeLoader if getattr(yaml, "__with_libyaml__", False) else None
"""libyaml's parser (C), whose events ``_build_plain`` turns into values; None in a PyYAML built without libyaml:
every document then takes the pure-Python loader."""


def _build_plain(text: str) -> Any:
    """The value of the single YAML document in ``text``, built from libyaml's events the way PyYAML's safe
    composer and constructor build it (the same resolver for plain scalars, the same constructor for each scalar
    tag, dicts and lists for mappings and sequences, a repeated key's last value), or ``_NOT_FAST`` where the
    document is not plain: an anchor or alias, an application tag, a merge key, a collection as a key, nesting
    deeper than ``FAST_MAX_DEPTH``, more than one document. One pass and no nodes, where ``yaml.load`` with
    ``CSafeLoader`` builds a node tree and walks it again in Python. A libyaml error propagates."""
    parser = _LibyamlParser(text)
    get_event, resolve, constructors = parser.get_event, parser.resolve, parser.yaml_constructors
    get_event()  # the stream's start
    if isinstance(get_event(), yaml.StreamEndEvent):
        return None  # no document: what yaml.load returns
    open_collections: list[list] = []  # innermost last: [list, _IN_SEQUENCE] or [dict, its key or _AWAITING_KEY]
    while True:
        event = get_event()
        kind = type(event)
        if kind is yaml.MappingEndEvent or kind is yaml.SequenceEndEvent:
            done = open_collections.pop()
            if not open_collections:
                document = done[0]
                break
            continue
        if kind is yaml.AliasEvent or event.anchor is not None or len(open_collections) >= FAST_MAX_DEPTH:
            return _NOT_FAST
        opened = None
        if kind is yaml.ScalarEvent:
            tag = event.tag
            if tag is None or tag == "!":  # quoted or "!": a string (the resolver has no path resolvers)
                tag = resolve(yaml.ScalarNode, event.value, event.implicit) if event.implicit[0] else _STR_TAG
            if tag == _STR_TAG:
                value = event.value
            elif tag in _SCALAR_TAGS:
                value = constructors[tag](parser, yaml.ScalarNode(tag, event.value))
            else:
                return _NOT_FAST
        elif event.tag not in _COLLECTION_TAGS:
            return _NOT_FAST
        elif kind is yaml.MappingStartEvent:
            value = {}
            opened = [value, _AWAITING_KEY]
        else:  # a sequence's start
            value = []
            opened = [value, _IN_SEQUENCE]
        if not open_collections:  # the document is this scalar, or this collection once it closes
            if opened is None:
                document = value
                break
        else:
            parent = open_collections[-1]
            container, key = parent
            if key is _IN_SEQUENCE:
                container.append(value)
            elif key is not _AWAITING_KEY:
                container[key] = value
                parent[1] = _AWAITING_KEY
            elif opened is None:
                parent[1] = value
            else:
                return _NOT_FAST  # a mapping or sequence as a key: PyYAML refuses it as unhashable
        if opened is not None:
            open_collections.append(opened)
    if not isinstance(get_event(), yaml.DocumentEndEvent) or not isinstance(get_event(), yaml.StreamEndEvent):
        return _NOT_FAST  # a second document: the pure-Python loader refuses it
    return document


def _parse_fast(text: str) -> Any:
    """``text`` parsed by libyaml when it is plain YAML (``_build_plain``) and libyaml takes it. ``_NOT_FAST``
    otherwise (and without libyaml): the pure-Python loader then parses it and words any refusal, so every error
    stays that loader's."""
    if _LibyamlParser is None:
        return _NOT_FAST
    try:
        return _build_plain(text)
    except Exception:  # noqa: BLE001 - any trouble: the pure-Python loader decides and says why
        return _NOT_FAST


def parse_yaml(text: str, origin: str) -> Any:
    """YAML ``text`` parsed safely, anchors and aliases refused; errors name ``origin`` and the line.

    Plain documents parse through libyaml (``_parse_fast``); the rest, and every document libyaml refuses, through
    the pure-Python ``NoAliasSafeLoader``, whose errors these are. Both resolve and construct scalars with PyYAML's
    same safe resolver and constructor (tests/test_fileio.py checks every shipped spec parses the same both ways)."""
    parsed = _parse_fast(text)
    if parsed is not _NOT_FAST:
        return parsed
    try:
        return yaml.load(text, Loader=NoAliasSafeLoader)  # noqa: S506 - a SafeLoader subclass
    except _AliasRefused as exc:
        raise InputFileError(origin, f"{_where(exc.mark)}YAML anchors and aliases (&name, *name) are not accepted: "
                                     "write the values out in full") from None
    except yaml.YAMLError as exc:
        raise SpecError(origin, "<file>", "<unparseable>", f"valid YAML ({_bounded(str(exc))})") from None
    except RecursionError:
        raise InputFileError(origin, "nested too deeply: expected valid YAML") from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise SpecError(origin, "<file>", "<unparseable>", f"valid YAML ({_bounded(str(exc))})") from None


def parse_json(text: str, origin: str) -> Any:
    """JSON ``text`` parsed; errors name ``origin``, the line and column."""
    if text.startswith("\ufeff"):
        text = text[1:]
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputFileError(origin, f"line {exc.lineno}, column {exc.colno}: expected valid JSON ({exc.msg})") from None
    except RecursionError:
        raise InputFileError(origin, "nested too deeply: expected valid JSON") from None
    except ValueError as exc:
        raise InputFileError(origin, f"expected valid JSON ({_bounded(str(exc))})") from None


def load_yaml(path: str | os.PathLike, *, what: str = "YAML file", max_bytes: int = DEFAULT_MAX_BYTES) -> Any:
    """Read and parse a YAML file through the bounded loader."""
    return parse_yaml(read_text(path, what=what, max_bytes=max_bytes), str(path))


def load_json(path: str | os.PathLike, *, what: str = "JSON file", max_bytes: int = DEFAULT_MAX_BYTES) -> Any:
    """Read and parse a JSON file through the bounded loader."""
    return parse_json(read_text(path, what=what, max_bytes=max_bytes), str(path))


# --- writing ---------------------------------------------------------------------------------------------------

def _allowed_in_specs() -> bool:
    return os.environ.get(SPECS_WRITE_ENV, "") == "1"


def _inside_specs(path: Path) -> Path | None:
    from workbench._data import specs_dir

    try:
        specs = Path(os.path.realpath(specs_dir()))
    except ModuleNotFoundError:
        return None
    target = Path(os.path.realpath(path))
    return specs if target == specs or specs in target.parents else None


def _first_file_above(path: Path) -> Path | None:
    for parent in reversed(path.parents):
        with contextlib.suppress(OSError):
            if not stat.S_ISDIR(os.stat(parent).st_mode):
                return parent
    return None


_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def _check_target(path: Path, raw: str, overwrite: bool) -> int | None:
    """Refuse targets that must not be written; the mode to keep when replacing a regular file, else None."""
    if raw.endswith(os.sep) or path.name in ("", ".", ".."):
        raise OutputError(f"{raw} is a folder: give a file name in it")
    specs = _inside_specs(path)
    if specs is not None and not _allowed_in_specs():
        raise OutputError(f"{path} is inside the workbench's shipped data ({specs}), which is read-only: write "
                          f"elsewhere (maintainers refitting the shipped profiles: set {SPECS_WRITE_ENV}=1)")
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        above = _first_file_above(path)
        raise OutputError(f"cannot write {path}: {above or 'a folder on the path'} is a file, not a folder") from None
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror}") from None
    shown, mode = "", info.st_mode
    if stat.S_ISLNK(mode):
        try:
            mode = os.stat(path).st_mode
        except OSError:
            if not overwrite:
                raise OutputExistsError(f"{path} exists (a dangling symlink to {os.readlink(path)}): pass --force "
                                        "to replace it (overwrite=True in Python)") from None
            return None
        shown = " (a symlink)"
    if stat.S_ISDIR(mode):
        raise OutputError(f"{path}{shown} is a folder: give a file name in it")
    for test, kind in _KINDS:
        if test(mode):
            raise OutputError(f"{path}{shown} is {kind}, not a regular file: the workbench never replaces one "
                              "(give the path of a regular file)")
    if not overwrite:
        raise OutputExistsError(f"{path} exists: pass --force to replace it (overwrite=True in Python)")
    return stat.S_IMODE(mode)


def check_output(path: str | os.PathLike, *, overwrite: bool = False) -> None:
    """Raise the ``OutputError`` that ``write_text(path, ..., overwrite=overwrite)`` would give for the target as
    it is now (call it before long work whose result goes there; the write itself checks again, atomically)."""
    _check_output(os.fspath(path), overwrite)


def _check_output(raw: str, overwrite: bool) -> int | None:
    target = Path(raw)
    keep_mode = _check_target(target, raw, overwrite)
    folder = target.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if folder.is_dir() and not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write {target}: the folder {folder} is read-only or not writable by this user")
    return keep_mode


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return pid > 0
    return True


def _temp_prefix(path: Path) -> str:
    return f".{path.name[:180]}{_TEMP_MARK}"  # keeps the temp name under NAME_MAX (255)


def sweep_temp_files(path: str | os.PathLike) -> list[Path]:
    """Remove stale temp files a write to ``path`` left behind (dead writer, or older than an hour)."""
    path = Path(path)
    prefix, removed, now = _temp_prefix(path), [], time.time()
    try:
        entries = list(os.scandir(path.parent))
    except OSError:
        return removed
    for entry in entries:
        if not entry.name.startswith(prefix):
            continue
        pid_text = entry.name[len(prefix):].partition("-")[0]
        try:
            stale = not pid_text.isdigit() or not _pid_alive(int(pid_text))
            stale = stale or now - entry.stat(follow_symlinks=False).st_mtime > STALE_TEMP_S
            if stale and entry.is_file(follow_symlinks=False):
                os.unlink(entry.path)
                removed.append(Path(entry.path))
        except OSError:
            continue
    return removed


_pending: set[str] = set()
_pending_lock = threading.Lock()
_handlers_depth = 0
_previous_handlers: dict[int, Any] = {}


def _remove_pending() -> None:
    for tmp in list(_pending):
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        _pending.discard(tmp)


def _on_signal(signum: int, frame: Any) -> None:
    """Remove our temp files, then do what the signal would have done without us."""
    _remove_pending()
    previous = _previous_handlers.get(signum, signal.SIG_DFL)
    if callable(previous):
        previous(signum, frame)
    else:  # SIG_DFL: die by the signal as we would have
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


@contextlib.contextmanager
def _cleanup_on_signals() -> Iterator[None]:
    """On the main thread, remove pending temp files on SIGTERM/SIGINT/SIGHUP during the write."""
    global _handlers_depth
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if _handlers_depth == 0:
        for signum in (signal.SIGTERM, signal.SIGINT, getattr(signal, "SIGHUP", None)):
            if signum is None:
                continue
            previous = signal.getsignal(signum)
            if previous in (signal.SIG_IGN, None):  # ignored, or set from C: leave it alone
                continue
            with contextlib.suppress(ValueError, OSError):
                signal.signal(signum, _on_signal)
                _previous_handlers[signum] = previous
    _handlers_depth += 1
    try:
        yield
    finally:
        _handlers_depth -= 1
        if _handlers_depth == 0:
            for signum, previous in list(_previous_handlers.items()):
                with contextlib.suppress(ValueError, OSError):
                    signal.signal(signum, previous)
                del _previous_handlers[signum]


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _fsync_folder(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _make_parent(path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        above = _first_file_above(path) or path.parent
        raise OutputError(f"cannot write {path}: {above} is a file, not a folder") from None
    except OSError as exc:
        raise OutputError(f"cannot create the folder {path.parent} ({exc.strerror})") from None


def _no_link(exc: OSError) -> bool:
    return exc.errno in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV, errno.EMLINK, errno.ENOSYS)


def write_bytes(path: str | os.PathLike, data: bytes, *, overwrite: bool = False) -> Path:
    """Write ``data`` to ``path`` atomically; an existing file is replaced only with ``overwrite=True``."""
    raw = os.fspath(path)
    path = Path(raw)
    keep_mode = _check_output(raw, overwrite)
    _make_parent(path)
    sweep_temp_files(path)
    import secrets  # here, not at the top: it imports random, hashlib and hmac, which only a write needs

    tmp = str(path.parent / f"{_temp_prefix(path)}{os.getpid()}-{secrets.token_hex(4)}")
    with _cleanup_on_signals():
        try:
            with _pending_lock:
                _pending.add(tmp)
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
            except OSError as exc:
                raise OutputError(f"cannot write in the folder {path.parent} ({exc.strerror})") from None
            try:
                _write_all(fd, data)
                if keep_mode is not None:
                    os.fchmod(fd, keep_mode)
                os.fsync(fd)
            finally:
                os.close(fd)
            _publish(tmp, path, overwrite)
            _fsync_folder(path.parent)
        except OSError as exc:
            if isinstance(exc, OutputError):
                raise
            raise OutputError(f"cannot write {path} ({exc.strerror or exc})") from None
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            with _pending_lock:
                _pending.discard(tmp)
    return path


def _publish(tmp: str, path: Path, overwrite: bool) -> None:
    """Put the finished temp file at ``path``: replace, or link without replacing (atomic no-clobber)."""
    if overwrite:
        try:
            os.replace(tmp, path)
        except IsADirectoryError:
            raise OutputError(f"{path} is a folder: give a file name in it") from None
        return
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise OutputExistsError(f"{path} exists: pass --force to replace it (overwrite=True in Python)") from None
    except OSError as exc:
        if not _no_link(exc):
            raise
        _copy_exclusive(tmp, path)  # a filesystem without hard links: no-clobber, though not atomic for readers


def _copy_exclusive(tmp: str, path: Path) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    except FileExistsError:
        raise OutputExistsError(f"{path} exists: pass --force to replace it (overwrite=True in Python)") from None
    try:
        with open(tmp, "rb") as src:
            while chunk := src.read(MiB):
                _write_all(fd, chunk)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    os.close(fd)


def write_text(path: str | os.PathLike, text: str, *, overwrite: bool = False) -> Path:
    """Write UTF-8 ``text`` to ``path`` atomically; an existing file is replaced only with ``overwrite=True``."""
    return write_bytes(path, text.encode("utf-8"), overwrite=overwrite)


@contextlib.contextmanager
def allow_specs_write() -> Iterator[None]:
    """Let writes inside the shipped ``specs/`` through (the maintainers' refit scripts)."""
    previous = os.environ.get(SPECS_WRITE_ENV)
    os.environ[SPECS_WRITE_ENV] = "1"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(SPECS_WRITE_ENV, None)
        else:
            os.environ[SPECS_WRITE_ENV] = previous
