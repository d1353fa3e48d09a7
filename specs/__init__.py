"""Data: GPU catalog (gpus/), model catalog (models/), efficiency constants and calibration profiles.

This folder installs as the package ``workbench.specs`` so that a wheel carries it; nothing here is code.
"""
