"""Shared fixtures: real SGLang CPU servers running the scripted tiny models.

The servers start once per session through the project's own launcher and are
stopped at the end, also when tests fail. `sim_servers` starts simulated ones instead
(eval/simserver.py), in threads of the test process.
"""

import atexit
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest
from cpu_servers import cpu_servers

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# a user's saved verifier calibrations must not change what the tests see
_CALIBRATION_DIR = tempfile.mkdtemp(prefix="lookahead-tests-")
atexit.register(shutil.rmtree, _CALIBRATION_DIR, ignore_errors=True)
os.environ["LOOKAHEAD_CALIBRATION"] = os.path.join(_CALIBRATION_DIR, "calibration.json")

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session")
def tiny_servers(tmp_path_factory):
    """tiny-draft as draft; tiny as target, sharing its server with the judge."""
    yield from cpu_servers(tmp_path_factory, "tiny-draft", "tiny")


@pytest.fixture(scope="session")
def tiny_endpoints(tiny_servers):
    return tiny_servers.endpoints()


class SimServers:
    """Three simulated SGLang servers (draft, target, judge) running in threads of the test process."""

    def __init__(self, draft, target, judge):
        self.draft, self.target, self.judge = draft, target, judge

    def by_role(self) -> dict:
        """role -> SimServerThread, in the order draft, target, judge."""
        return {"draft": self.draft, "target": self.target, "judge": self.judge}

    def endpoints(self, chat_template: str = "chatml"):
        from lookahead_reasoning.runtime.servers.endpoints import ServerAddress, Endpoints

        return Endpoints(**{role: ServerAddress(url=server.url, chat_template=chat_template)
                            for role, server in self.by_role().items()})

    def heal(self) -> None:
        """Every server answers normally again (undoes /sim/fault)."""
        for server in self.by_role().values():
            server.engine.state.fault = "ok"


def _sim_config(role: str, given):
    from lookahead_reasoning.eval.simserver import SimConfig

    if given is None:
        return SimConfig(role=role)
    if isinstance(given, SimConfig):
        assert given.role == role, f"a {given.role} SimConfig given for the {role} server"
        return given
    return SimConfig(role=role, **given)


@contextmanager
def _start_sim_servers(draft=None, target=None, judge=None) -> Iterator[SimServers]:
    from lookahead_reasoning.eval.simserver import SimServerThread

    configs = [_sim_config(role, given) for role, given in (("draft", draft), ("target", target), ("judge", judge))]
    with SimServerThread(configs[0]) as d, SimServerThread(configs[1]) as t, SimServerThread(configs[2]) as j:
        yield SimServers(d, t, j)


@pytest.fixture(scope="session")
def sim_servers():
    """A factory of simulated three-server clusters, usable from fixtures of any scope:

        with sim_servers(draft=SimConfig(role="draft", decode_ms=1.0), judge={"alpha": 0.7}) as sims:
            sims.target.url, sims.endpoints()

    Each role takes a SimConfig of that role, a dict of SimConfig fields (the role is filled
    in), or nothing (the defaults). The servers stop when the block ends.
    """
    return _start_sim_servers
