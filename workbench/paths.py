"""Where the workbench keeps the user's own files, apart from the shipped (read-only) data.

Calibration profiles are read from the user's folder first, then from the shipped ``specs/calibration``;
``workbench calibrate`` and ``workbench select --fit`` write into the user's folder. The user's folder is
``$WORKBENCH_HOME/calibration``, by default ``$XDG_CONFIG_HOME/workbench/calibration`` (``~/.config/...``).
``WORKBENCH_CALIBRATION_DIR`` replaces both with one folder, read and written (tests, scratch fits).
"""

from __future__ import annotations

import os
from pathlib import Path

from workbench._data import specs_dir

HOME_ENV = "WORKBENCH_HOME"
CALIBRATION_DIR_ENV = "WORKBENCH_CALIBRATION_DIR"


def workbench_home() -> Path:
    """``$WORKBENCH_HOME``, else ``$XDG_CONFIG_HOME/workbench``, else ``~/.config/workbench``."""
    if os.environ.get(HOME_ENV):
        return Path(os.environ[HOME_ENV]).expanduser()
    config = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(config).expanduser() / "workbench"


def shipped_calibration_dir() -> Path:
    """The profiles that ship with the package (read-only data)."""
    return specs_dir() / "calibration"


def user_calibration_dir() -> Path:
    """The folder calibration profiles are written to: ``WORKBENCH_CALIBRATION_DIR`` or the user's folder."""
    return Path(os.environ.get(CALIBRATION_DIR_ENV) or workbench_home() / "calibration")


def calibration_dirs() -> list[Path]:
    """The folders profiles are read from, first match wins: the user's, then the shipped one."""
    if os.environ.get(CALIBRATION_DIR_ENV):
        return [Path(os.environ[CALIBRATION_DIR_ENV])]
    return [user_calibration_dir(), shipped_calibration_dir()]


def find_calibration_file(name: str) -> Path:
    """The profile ``name`` that predictions read (the first folder that has it), or the user folder's path."""
    folders = calibration_dirs()
    for folder in folders:
        if (folder / name).is_file():
            return folder / name
    return folders[0] / name
