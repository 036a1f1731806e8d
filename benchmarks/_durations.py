"""A pytest plugin for ``benchmarks/seeds.py``: writes each test's call duration (seconds,
full resolution) as JSON to the file named by ``SYMTAPE_DURATIONS``."""

from __future__ import annotations

import json
import os

_DURATIONS: dict = {}


def pytest_runtest_logreport(report) -> None:
    if report.when == "call" and report.passed:
        _DURATIONS[report.nodeid] = report.duration


def pytest_sessionfinish(session, exitstatus) -> None:
    path = os.environ.get("SYMTAPE_DURATIONS")
    if path:
        with open(path, "w") as f:
            json.dump(_DURATIONS, f)
