"""`workbench lab` starts a real JupyterLab server on the workbench notebook."""

import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("jupyterlab")
ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_workbench_lab_serves_the_notebook(tmp_path):
    port, token = _free_port(), secrets.token_hex(16)
    command = [sys.executable, "-m", "workbench.cli", "lab", "--no-browser", "--port", str(port),
               "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={token}"]
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path)}
    server = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2) as reply:
                    assert reply.status == 200
                    break
            except OSError:
                assert server.poll() is None, server.stdout.read()
                assert time.time() < deadline, "JupyterLab did not answer within 60 s"
                time.sleep(0.5)
        with urllib.request.urlopen(f"{base}/api/contents/notebooks/workbench.ipynb?token={token}", timeout=10) as reply:
            notebook = json.load(reply)
        assert notebook["type"] == "notebook" and notebook["content"]["metadata"]["kernelspec"]["name"] == "python3"
        with urllib.request.urlopen(f"{base}/lab?token={token}", timeout=10) as reply:
            assert b"JupyterLab" in reply.read()
    finally:
        server.terminate()
        server.wait(timeout=20)
