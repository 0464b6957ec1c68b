"""The environment CPU servers start with: the CPU engine, the common_ops stand-in, passive OpenMP threads."""

import os
from pathlib import Path

import pytest

from cli_invoke import invoke
from lookahead_reasoning.runtime.servers.specs import LaunchSpec
from lookahead_reasoning.runtime.servers.starting import ServerGroup
from lookahead_reasoning.runtime.servers.server_models import cpu_stub_dir


def _group(device="cpu"):
    return ServerGroup(LaunchSpec("tiny-draft", "tiny", device=device), log=lambda m: None)


def test_cpu_servers_get_passive_openmp_threads_the_engine_and_the_stub(monkeypatch):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.setenv("PYTHONPATH", "/user/path")
    env = _group().environment()
    assert env["OMP_WAIT_POLICY"] == "PASSIVE" and env["SGLANG_USE_CPU_ENGINE"] == "1"
    assert env["PYTHONPATH"].split(os.pathsep) == [str(cpu_stub_dir()), "/user/path"]
    assert env["HOME"] == os.environ["HOME"]  # the caller's environment is passed on


def test_an_openmp_wait_policy_the_caller_sets_is_kept(monkeypatch):
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert _group().environment()["OMP_WAIT_POLICY"] == "ACTIVE"
    assert "OMP_WAIT_POLICY" not in _group().cpu_variables()


def test_gpu_servers_get_the_callers_environment_unchanged(monkeypatch):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    group = _group("cuda")
    assert group.cpu_variables() == {} and group.environment() == dict(os.environ)


def test_dry_run_shows_the_variables_before_each_cpu_command(monkeypatch, capsys):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    out = invoke(capsys, "launch", "--draft", "tiny-draft", "--target", "tiny", "--device", "cpu", "--dry-run")
    assert out.returncode == 0, out.stderr
    commands = [line for line in out.stdout.splitlines() if "sglang.launch_server" in line]
    assert len(commands) == 2
    assert all(line.startswith("SGLANG_USE_CPU_ENGINE=1 OMP_WAIT_POLICY=PASSIVE PYTHONPATH=") for line in commands)


@pytest.mark.server
def test_real_cpu_servers_run_with_that_environment(tiny_servers):
    expected = os.environ.get("OMP_WAIT_POLICY", "PASSIVE")
    for server in tiny_servers.servers:
        environ = Path(f"/proc/{server.process.pid}/environ").read_bytes().split(b"\0")
        assert f"OMP_WAIT_POLICY={expected}".encode() in environ, server.label
        assert b"SGLANG_USE_CPU_ENGINE=1" in environ, server.label
