"""Shared fixtures: real SGLang CPU servers running the scripted tiny models.

The servers start once per session through the project's own launcher and are
stopped at the end, also when tests fail.
"""

import os
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# a user's saved verifier calibrations must not change what the tests see
os.environ["LOOKAHEAD_CALIBRATION"] = os.path.join(tempfile.mkdtemp(prefix="lookahead-tests-"), "calibration.json")

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session")
def tiny_servers(tmp_path_factory):
    """tiny-draft as draft; tiny as target, sharing its server with the judge."""
    from lookahead_reasoning.runtime.launcher import ServerGroup

    group = ServerGroup(
        draft="tiny-draft", target="tiny", device="cpu", max_total_tokens=8192,
        log_dir=tmp_path_factory.mktemp("server-logs"), startup_timeout_s=300, log=lambda m: None,
    )
    with group:
        yield group


@pytest.fixture(scope="session")
def tiny_endpoints(tiny_servers):
    return tiny_servers.endpoints()
