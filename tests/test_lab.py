"""`workbench lab` starts a real JupyterLab server on the workbench notebook, without the Jupyter news prompt
(here and on Binder), and stops it (and its kernels) on SIGTERM and on a terminal's Ctrl-C;
``run_until_stopped``'s escalation is checked with a child that ignores SIGTERM. Every process a test starts is gone when it ends, failed or not (``_Lab.close``).

Process checks read /proc (Linux): a pid counts as gone when /proc has no entry or it is a zombie (this
container's init may not reap orphans)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import select
import signal
import socket
import subprocess
import sys
import termios
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from workbench.lab import LAB_SETTINGS, OVERRIDES_FILE, install_lab_settings, lab_settings_dir, run_until_stopped

ROOT = Path(__file__).resolve().parents[1]
STOP_BOUND_S = 15.0
"""How long a stopped server and its kernels may take to be gone: Jupyter's clean stop (kernel shutdown
requests, 5 s before it kills a kernel) here takes 1-3 s; well under ``workbench.lab.STOP_GRACE_S``."""

needs_proc = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc (Linux)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")  # the state field follows "(comm)"


def _wait_gone(pids: list[int], bound_s: float) -> list[int]:
    """The pids still alive after up to ``bound_s`` seconds (none: all gone)."""
    deadline = time.monotonic() + bound_s
    while (left := [p for p in pids if _alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def _pids_with_arg(arg: str) -> list[int]:
    """Processes whose command line has ``arg`` as one of its words (a kernel: its connection file)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if arg.encode() in (entry / "cmdline").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
    return found


def _kill_group(pid: int) -> None:
    """SIGKILL ``pid``'s process group if it leads one (Jupyter and kernels do), else ``pid`` itself."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if os.getpgid(pid) == pid:
            os.killpg(pid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)


class _Lab:
    """``workbench lab`` started for a test: the workbench process, the Jupyter server's pid (from its
    jpserver-<pid>.json), the kernels started through ``start_kernel``. ``close`` stops all of them."""

    def __init__(self, tmp_path: Path, *, tty: bool = False, jupyter_args: tuple[str, ...] = ()):
        self.runtime = tmp_path / "runtime"
        self.port, self.token = _free_port(), secrets.token_hex(16)
        self.base = f"http://127.0.0.1:{self.port}"
        self.server_pid: int | None = None
        self.kernel_pids: list[int] = []
        self.output: list[bytes] = []
        self._closing = threading.Event()
        command = [sys.executable, "-m", "workbench.cli", "lab", "--no-browser", "--port", str(self.port),
                   "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={self.token}", *jupyter_args]
        env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(self.runtime), "PYTHONUNBUFFERED": "1",
               "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "user-settings")}  # a fresh user: no choice made yet
        if tty:  # a terminal of its own: a Ctrl-C typed into it signals its foreground process group
            self.terminal, slave = os.openpty()
            self.process = subprocess.Popen(command, cwd=ROOT, env=env, stdin=slave, stdout=slave, stderr=slave,
                                            start_new_session=True, preexec_fn=_take_terminal)
            os.close(slave)
            self._reader = threading.Thread(target=self._drain, daemon=True)
            self._reader.start()
        else:
            self.terminal = None
            self.log = open(tmp_path / "lab.log", "wb")
            self.process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                            start_new_session=True)

    def _drain(self) -> None:
        while not self._closing.is_set():
            if select.select([self.terminal], [], [], 0.1)[0]:
                try:
                    self.output.append(os.read(self.terminal, 65536))
                except OSError:  # EIO: every process holding the terminal has closed it
                    return

    def text(self) -> str:
        if self.terminal is None:
            self.log.flush()
            return Path(self.log.name).read_text(errors="replace")
        return b"".join(self.output).decode(errors="replace")

    def get(self, path: str, timeout: float = 10):
        with urllib.request.urlopen(f"{self.base}{path}?token={self.token}", timeout=timeout) as reply:
            assert reply.status == 200
            return json.load(reply) if "json" in reply.headers.get("Content-Type", "") else reply.read()

    def wait_ready(self, bound_s: float = 60) -> None:
        deadline = time.monotonic() + bound_s
        while True:
            try:
                self.get("/api/status", timeout=2)
                break
            except OSError:
                assert self.process.poll() is None, self.text()
                assert time.monotonic() < deadline, f"JupyterLab did not answer within {bound_s:.0f} s"
                time.sleep(0.5)
        (info,) = [json.loads(p.read_text()) for p in self.runtime.glob("jpserver-*.json")]
        assert info["port"] == self.port
        self.server_pid = info["pid"]
        assert self.server_pid != self.process.pid and _alive(self.server_pid)

    def start_kernel(self) -> int:
        request = urllib.request.Request(f"{self.base}/api/kernels", data=b'{"name": "python3"}', method="POST",
                                         headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(request, timeout=60) as reply:
            kernel_id = json.load(reply)["id"]
        connection_file = str(self.runtime / f"kernel-{kernel_id}.json")
        deadline = time.monotonic() + 30
        while not (pids := _pids_with_arg(connection_file)):
            assert time.monotonic() < deadline, f"no kernel process with {connection_file}"
            time.sleep(0.1)
        self.kernel_pids += pids
        return pids[0]

    def close(self) -> None:
        """Stop everything this test started, whatever state it is in: SIGTERM to ``workbench lab`` (the
        behaviour under test), then SIGKILL to what is left (groups: Jupyter and its kernels lead their own)."""
        try:
            if self.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    self.process.send_signal(signal.SIGTERM)
                try:
                    self.process.wait(timeout=STOP_BOUND_S)
                except subprocess.TimeoutExpired:
                    _kill_group(self.process.pid)
                    self.process.wait()
            for pid in [self.server_pid, *self.kernel_pids]:
                if pid is not None and _alive(pid):
                    _kill_group(pid)
        finally:
            if self.terminal is None:
                self.log.close()
            else:
                self._closing.set()
                self._reader.join()
                os.close(self.terminal)


def _take_terminal() -> None:
    """In the child, after setsid: make its stdin (the pty) its controlling terminal, so the child's group is the
    terminal's foreground group, as a shell runs a command."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


@contextlib.contextmanager
def _lab(tmp_path: Path, **kwargs):
    lab = _Lab(tmp_path, **kwargs)
    try:
        lab.wait_ready()
        yield lab
    finally:
        lab.close()


def test_workbench_lab_serves_the_notebook(tmp_path):
    pytest.importorskip("jupyterlab")
    settings_dir = tmp_path / "lab-settings"  # JupyterLab's application settings, here empty until launch writes
    with _lab(tmp_path, jupyter_args=(f"--LabApp.app_settings_dir={settings_dir}",)) as lab:
        notebook = lab.get("/api/contents/notebooks/workbench.ipynb")
        assert notebook["type"] == "notebook" and notebook["content"]["metadata"]["kernelspec"]["name"] == "python3"
        assert b"JupyterLab" in lab.get("/lab")
        # the URL it prints opens the notebook itself (not the Launcher), with the server's token
        url = f"http://localhost:{lab.port}/lab/tree/notebooks/workbench.ipynb?token={lab.token}"
        assert f"workbench: open {url}" in lab.text() and "ssh -L" in lab.text()
        assert b"JupyterLab" in lab.get("/lab/tree/notebooks/workbench.ipynb")
        # No news prompt: JupyterLab asks while fetchNews is "none"; the server now gives "false" as its default
        notification = lab.get("/lab/api/settings/@jupyterlab/apputils-extension:notification")
        assert notification["schema"]["properties"]["fetchNews"]["default"] == "false"
        assert notification["schema"]["properties"]["checkForUpdates"]["default"] is False
        assert "fetchNews" not in (notification.get("settings") or {})  # the user's own choice would win
        assert (settings_dir / OVERRIDES_FILE).is_file()


def test_lab_settings_go_where_jupyterlab_looks_by_default():
    labapp = pytest.importorskip("jupyterlab.labapp")
    assert lab_settings_dir() == Path(labapp.LabApp().app_settings_dir)


def test_lab_picks_a_port_and_token_and_prints_the_notebook_url(monkeypatch, capsys, tmp_path):
    """Without --port or a token, launch makes both, so it can print the URL before Jupyter starts."""
    pytest.importorskip("jupyterlab")
    from workbench import lab as lab_module

    started = []
    monkeypatch.setattr(lab_module, "run_until_stopped", lambda command, cwd: started.append(command) or 0)
    assert lab_module.launch(open_browser=False) == 0
    command, out = started[0], capsys.readouterr().out
    token = next(c.split("=", 1)[1] for c in command if c.startswith("--IdentityProvider.token="))
    port = next(c.split("=", 1)[1] for c in command if c.startswith("--port="))
    assert f"http://localhost:{port}/lab/tree/notebooks/workbench.ipynb?token={token}" in out
    assert token not in out.splitlines()[0]  # the command line it echoes hides the token


def _overrides_jupyterlab_reads(settings_dir: Path) -> dict:
    """The setting defaults JupyterLab's server takes from ``settings_dir`` (its own reader)."""
    settings_utils = pytest.importorskip("jupyterlab_server.settings_utils")
    overrides, error = settings_utils._get_overrides(str(settings_dir))
    assert not error, error
    return overrides


def test_lab_settings_go_beside_the_owners_overrides_and_jupyterlab_reads_them(tmp_path):
    owners = {"@jupyterlab/notebook-extension:tracker": {"scrollPastEnd": False}}
    (tmp_path / "overrides.json").write_text(json.dumps(owners))
    path = install_lab_settings(tmp_path)
    assert path == tmp_path / OVERRIDES_FILE and json.loads(path.read_text()) == LAB_SETTINGS
    assert json.loads((tmp_path / "overrides.json").read_text()) == owners  # not replaced
    read = _overrides_jupyterlab_reads(tmp_path)
    assert read["@jupyterlab/apputils-extension:notification"]["fetchNews"] == "false"
    assert read["@jupyterlab/notebook-extension:tracker"] == owners["@jupyterlab/notebook-extension:tracker"]
    before = path.stat()
    assert install_lab_settings(tmp_path) == path
    assert (path.stat().st_ino, path.stat().st_mtime_ns) == (before.st_ino, before.st_mtime_ns)  # unchanged: kept
    path.write_text('{"@jupyterlab/apputils-extension:notification": {"fetchNews": "none"}}')
    install_lab_settings(tmp_path)
    assert json.loads(path.read_text()) == LAB_SETTINGS  # an older or edited copy of ours is brought up to date


def test_binder_post_build_installs_the_same_defaults(tmp_path):
    """binder/postBuild's last step, run here against throwaway JupyterLab folders: this environment's (as
    JUPYTERLAB_DIR) and repo2docker's notebook-server environment (NB_PYTHON_PREFIX)."""
    pytest.importorskip("jupyterlab")
    text = (ROOT / "binder" / "postBuild").read_text()
    head, _, rest = text.partition("python - \"${NB_PYTHON_PREFIX:-}\" <<'EOF'\n")
    assert rest and "pip install" in head, "postBuild ends by installing the JupyterLab defaults, after the project"
    script = rest.split("\nEOF\n", 1)[0]
    app_dir, prefix = tmp_path / "app", tmp_path / "nb-prefix"
    env = {**os.environ, "JUPYTERLAB_DIR": str(app_dir)}
    subprocess.run([sys.executable, "-", str(prefix)], input=script, text=True, cwd=ROOT, env=env, check=True,
                   capture_output=True, timeout=60)
    for settings_dir in (app_dir / "settings", prefix / "share" / "jupyter" / "lab" / "settings"):
        read = _overrides_jupyterlab_reads(settings_dir)
        assert read["@jupyterlab/apputils-extension:notification"]["fetchNews"] == "false", settings_dir


@needs_proc
def test_sigterm_stops_jupyter_and_its_kernels(tmp_path):
    pytest.importorskip("jupyterlab")
    with _lab(tmp_path) as lab:
        kernel = lab.start_kernel()
        lab.process.send_signal(signal.SIGTERM)
        assert lab.process.wait(timeout=STOP_BOUND_S) == 0, lab.text()
        assert _wait_gone([lab.server_pid, kernel], STOP_BOUND_S) == [], lab.text()
        assert not list(lab.runtime.glob("jpserver-*.json")), "Jupyter did not stop cleanly (its server file is left)"


@needs_proc
def test_ctrl_c_in_a_terminal_stops_jupyter_once_without_its_prompt(tmp_path):
    pytest.importorskip("jupyterlab")
    with _lab(tmp_path, tty=True) as lab:
        kernel = lab.start_kernel()
        assert os.tcgetpgrp(lab.terminal) == lab.process.pid  # workbench lab is the terminal's foreground group
        os.write(lab.terminal, b"\x03")  # Ctrl-C: the line discipline sends SIGINT to the foreground group
        assert lab.process.wait(timeout=STOP_BOUND_S) == 0, lab.text()
        assert _wait_gone([lab.server_pid, kernel], STOP_BOUND_S) == [], lab.text()
        assert not list(lab.runtime.glob("jpserver-*.json")), "Jupyter did not stop cleanly (its server file is left)"
        time.sleep(0.2)  # the last output on its way through the terminal
        assert "Shut down this Jupyter server" not in lab.text()


@needs_proc
def test_a_second_signal_kills_jupyter_at_once_and_its_kernels_still_go(tmp_path):
    """Ctrl-C twice: the second kills Jupyter's process group without waiting for its clean stop; its kernels,
    in sessions of their own, exit as their parent poller sees the server gone."""
    pytest.importorskip("jupyterlab")
    with _lab(tmp_path) as lab:
        kernel = lab.start_kernel()
        lab.process.send_signal(signal.SIGINT)
        lab.process.send_signal(signal.SIGINT)
        assert lab.process.wait(timeout=STOP_BOUND_S) in (0, 128 + signal.SIGKILL), lab.text()
        assert _wait_gone([lab.server_pid, kernel], STOP_BOUND_S) == [], lab.text()


# --- run_until_stopped with a stand-in for Jupyter (no server: fast) --------------------------------------------

_STUBBORN = ("import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
             "print(os.getpid(), flush=True); time.sleep(120)")


def _runner(grace_s: float, child_code: str = _STUBBORN, prelude: str = "") -> tuple[subprocess.Popen, int]:
    """A Python process running ``run_until_stopped`` on a child that prints its pid (by default one that ignores
    SIGTERM); (runner, child pid)."""
    code = (f"import signal, sys; {prelude or 'pass'}; from workbench.lab import run_until_stopped; "
            f"sys.exit(run_until_stopped([sys.executable, '-c', {child_code!r}], grace_s={grace_s}))")
    runner = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    ready, _, _ = select.select([runner.stdout], [], [], 30)
    if not ready:
        _kill_group(runner.pid)
        raise AssertionError("the stand-in child did not start within 30 s")
    return runner, int(runner.stdout.readline())


@needs_proc
@pytest.mark.parametrize("second_signal", [False, True], ids=["grace-expires", "second-signal"])
def test_a_child_that_ignores_sigterm_is_killed(second_signal):
    grace_s = 30.0 if second_signal else 1.0
    runner, child = _runner(grace_s)
    try:
        assert os.getpgid(child) == child != os.getpgid(runner.pid)  # its own session: Ctrl-C does not reach it
        start = time.monotonic()
        runner.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        assert _alive(child) and runner.poll() is None  # SIGTERM ignored: waiting out the grace period
        if second_signal:
            runner.send_signal(signal.SIGINT)
        assert runner.wait(timeout=10) == 128 + signal.SIGKILL
        assert _wait_gone([child], 5) == []
        assert time.monotonic() - start < (5 if second_signal else grace_s + 5)
    finally:
        for pid in (runner.pid, child):
            if _alive(pid):
                _kill_group(pid)
        runner.wait()


@needs_proc
def test_an_ignored_signal_stays_ignored():
    """Under nohup (SIGHUP ignored) a hang-up does not stop Jupyter: the child runs on and its exit code comes back."""
    child_code = "import os, time; print(os.getpid(), flush=True); time.sleep(1.5)"
    runner, child = _runner(30.0, child_code, prelude="signal.signal(signal.SIGHUP, signal.SIG_IGN)")
    try:
        runner.send_signal(signal.SIGHUP)
        assert runner.wait(timeout=15) == 0
    finally:
        for pid in (runner.pid, child):
            if _alive(pid):
                _kill_group(pid)
        runner.wait()


def test_exit_code_comes_back_and_signal_handlers_are_restored():
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    assert run_until_stopped([sys.executable, "-c", "import sys; sys.exit(3)"]) == 3
    assert run_until_stopped([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"]) \
        == 128 + signal.SIGTERM
    assert {s: signal.getsignal(s) for s in before} == before
    with pytest.raises(FileNotFoundError):
        run_until_stopped(["/nonexistent/jupyter"])
    assert {s: signal.getsignal(s) for s in before} == before
