"""``workbench lab``: open the workbench notebook in JupyterLab.

Jupyter runs as a child in its own session (``start_new_session``), so the terminal's Ctrl-C reaches only
``workbench lab``, which passes a stop on exactly once. SIGINT, SIGTERM and SIGHUP to ``workbench lab`` all stop
Jupyter the way Jupyter itself documents as its clean stop, SIGTERM: it shuts its kernels down, removes its
``jpserver-*.json`` file and exits. (Forwarded as they came, SIGINT would ask "Shut down this Jupyter server
(y/[n])?" when stdin is a terminal, and SIGHUP, which Jupyter does not handle, would kill it before it stops its
kernels.) So one Ctrl-C stops the server without the y/n prompt; a second stop signal while it shuts down kills
its process group at once, and so does ``STOP_GRACE_S`` passing. Kernels live in sessions of their own (as
``jupyter_client`` starts them) and exit by themselves when the server is gone (ipykernel's parent poller).

JupyterLab 4 asks "Would you like to get notified about official Jupyter news?" at start, until a user answers,
while its ``@jupyterlab/apputils-extension:notification`` setting ``fetchNews`` is ``"none"`` (its default:
ask), whatever ``--LabApp.news_url`` says. ``install_lab_settings`` (called by ``launch`` and by ``binder/postBuild``) sets that
default to ``"false"`` in an ``overrides.d/`` file of JupyterLab's application settings folder, which
JupyterLab reads at start (jupyterlab_server's ``_get_overrides``): a default, so a user who turns news on under
Settings > Notifications keeps that choice.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

from workbench.errors import WorkbenchError
from workbench.fileio import read_text, write_text

DEFAULT_NOTEBOOK = Path("notebooks") / "workbench.ipynb"
STOP_GRACE_S = 20.0
"""Seconds Jupyter gets to stop after the first stop signal before its process group is killed. A guess with
room: shutting down a few idle kernels takes 1-3 s on a laptop; raise it for many busy kernels."""
STOP_SIGNALS: tuple[signal.Signals, ...] = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))
"""The signals ``workbench lab`` passes on to Jupyter (as SIGTERM, its clean stop)."""
_KILL = getattr(signal, "SIGKILL", signal.SIGTERM)  # Windows has no SIGKILL
LAB_SETTINGS: dict[str, dict[str, object]] = {
    "@jupyterlab/apputils-extension:notification": {
        "fetchNews": "false",  # "none" (JupyterLab's default) asks about Jupyter news on every start
        "checkForUpdates": False,  # the "a newer JupyterLab is available" check; it also fetches from the web
    },
}
"""The JupyterLab setting defaults ``workbench lab`` and Binder install (see the module docstring)."""
OVERRIDES_FILE = Path("overrides.d") / "workbench.json"
"""Where in JupyterLab's application settings folder they go: a file of ours, beside (not over) any
``overrides.json`` of the environment's owner."""


def find_notebook(notebook: str | None = None) -> Path:
    """The notebook to open: the given path, else notebooks/workbench.ipynb here or in the source checkout."""
    candidates = [Path(notebook)] if notebook else [Path.cwd() / DEFAULT_NOTEBOOK,
                                                     Path(__file__).resolve().parents[1] / DEFAULT_NOTEBOOK]
    for path in candidates:
        if path.is_file():
            return path.resolve()
    raise WorkbenchError(f"notebook not found (looked at {', '.join(str(p) for p in candidates)}); "
                         f"run from the repository root or pass --notebook PATH")


def launch(notebook: str | None = None, *, port: int = 0, open_browser: bool = True,
           jupyter_args: list[str] | None = None) -> int:
    """Start JupyterLab with the notebook open and wait for it; ``jupyter_args`` go to Jupyter unchanged.
    Stop signals are passed on (see the module docstring). Returns its exit code (128 + N if signal N killed it)."""
    if importlib.util.find_spec("jupyterlab") is None:
        raise WorkbenchError("JupyterLab is not installed: install the UI extras with "
                             "`pip install -e '.[lab]'` (./dev lab does this for you)")
    path = find_notebook(notebook)
    root = path.parent.parent if path.parent.name == "notebooks" else path.parent
    extra = jupyter_args or []
    try:
        install_lab_settings(_given(extra, "--LabApp.app_settings_dir"))
    except (OSError, WorkbenchError) as exc:  # a read-only environment: JupyterLab still starts, and asks
        print(f"workbench: could not set JupyterLab's defaults ({exc}); it may ask about Jupyter news: answer "
              "it once, or set Settings > Notifications > Fetch official Jupyter news to Never", flush=True)
    command = [sys.executable, "-m", "jupyter", "lab", f"--ServerApp.root_dir={root}", "--LabApp.news_url=None",
               str(path.relative_to(root))]
    if port:
        command.append(f"--port={port}")
    if not open_browser:
        command.append("--no-browser")
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # containers and CI run as root; Jupyter refuses without this
        command.append("--allow-root")
    token = _given(extra, "--IdentityProvider.token", "--ServerApp.token")
    if token is None:  # ours, so the notebook's own URL can be printed before Jupyter starts
        token = secrets.token_hex(24)
        command.append(f"--IdentityProvider.token={token}")
    if not port and _given(extra, "--port", "--ServerApp.port") is None:
        port = _free_port()
        command += [f"--port={port}", "--ServerApp.port_retries=0"]
    command += extra
    print("starting:", " ".join(c if "token=" not in c else c.split("=", 1)[0] + "=***" for c in command), flush=True)
    if port:
        print(notebook_url(port, path.relative_to(root), token), flush=True)
    return run_until_stopped(command, cwd=root)


def lab_settings_dir() -> Path:
    """JupyterLab's application settings folder, as ``jupyter lab`` run by this Python finds it by default
    (``<app dir>/settings``; the app dir is ``$JUPYTERLAB_DIR`` or ``<sys.prefix>/share/jupyter/lab``)."""
    from jupyterlab.commands import get_app_dir

    return Path(get_app_dir()) / "settings"


def install_lab_settings(settings_dir: str | Path | None = None) -> Path:
    """Write ``LAB_SETTINGS`` to ``OVERRIDES_FILE`` in ``settings_dir`` (default: ``lab_settings_dir()``), unless
    it already holds them; returns the file's path."""
    path = Path(settings_dir or lab_settings_dir()) / OVERRIDES_FILE
    text = json.dumps(LAB_SETTINGS, indent=2) + "\n"
    if path.is_file() and read_text(path, what="JupyterLab settings overrides") == text:
        return path
    return write_text(path, text, overwrite=True)


def notebook_url(port: int, notebook: Path, token: str) -> str:
    """What to open: the notebook itself (not the Launcher), and how to reach it from another machine."""
    url = f"http://localhost:{port}/lab/tree/{notebook.as_posix()}?token={token}"
    return (f"workbench: open {url}\n"
            f"workbench: on a remote machine, forward the port first: ssh -L {port}:localhost:{port} USER@HOST")


def _given(args: list[str], *names: str) -> str | None:
    """The value of a ``--name=value`` or ``--name value`` Jupyter option among ``args``, or None."""
    for i, arg in enumerate(args):
        for name in names:
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
            if arg == name and i + 1 < len(args):
                return args[i + 1]
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_until_stopped(command: list[str], *, cwd: str | Path | None = None, grace_s: float = STOP_GRACE_S) -> int:
    """Run ``command`` in its own session and wait for it, passing ``STOP_SIGNALS`` on as SIGTERM (the first
    one; a second, or ``grace_s`` without exiting, kills its process group); a signal ignored here (``nohup``)
    stays ignored. The previous signal handlers are restored on return. Returns its exit code, 128 + N if
    signal N killed it (the shell's convention).

    Stdin is /dev/null: Jupyter reads nothing from it, and without a terminal there it never prompts."""
    stopper = _Stopper(grace_s)
    previous = {}
    if threading.current_thread() is threading.main_thread():  # Python takes signals in the main thread only
        for signum in STOP_SIGNALS:
            if signal.getsignal(signum) is not signal.SIG_IGN:  # nohup's SIGHUP, a background job's SIGINT: kept
                previous[signum] = signal.signal(signum, stopper.on_signal)
    try:
        child = subprocess.Popen(command, cwd=cwd, stdin=subprocess.DEVNULL, start_new_session=True)
        stopper.attach(child)  # a signal that came while it started is passed on now
        try:
            returncode = child.wait()
        finally:
            stopper.cancel()
            if child.returncode is None:  # the wait itself failed (not a signal of ours): leave nothing behind
                _signal_group(child, _KILL)
                child.wait()
    finally:
        for signum, handler in previous.items():  # None: a handler set outside Python, which cannot be put back
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)
    return 128 - returncode if returncode < 0 else returncode


class _Stopper:
    """The signal handler of ``run_until_stopped``: SIGTERM on the first stop signal and a timer that kills the
    process group after the grace period; a second stop signal kills it at once."""

    def __init__(self, grace_s: float):
        self.grace_s = grace_s
        self.child: subprocess.Popen | None = None
        self.pending = False  # a signal came before the child existed
        self.timer: threading.Timer | None = None

    def on_signal(self, signum, frame) -> None:
        if self.child is None:
            self.pending = True
        elif self.timer is None:
            self._stop()
        else:
            self._kill()

    def attach(self, child: subprocess.Popen) -> None:
        self.child = child
        if self.pending:
            self._stop()

    def _stop(self) -> None:
        _signal_group(self.child, signal.SIGTERM, group=False)  # Jupyter's clean stop, to the server alone
        self.timer = threading.Timer(self.grace_s, self._kill)
        self.timer.daemon = True
        self.timer.start()

    def _kill(self) -> None:
        _signal_group(self.child, _KILL)

    def cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()


def _signal_group(child: subprocess.Popen, signum: int, *, group: bool = True) -> None:
    """Send ``signum`` to ``child`` (its whole process group when ``group``) unless it has been waited for: its
    pid, which is also its group's id (it leads its own session), cannot have been reused before that."""
    if child.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if group and hasattr(os, "killpg"):
            os.killpg(child.pid, signum)
        else:
            child.send_signal(signum)
