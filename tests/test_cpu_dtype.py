"""The dtype of CPU servers: detection from CPU flags, the command line, the warning, --dry-run, the endpoints file."""

import json

import pytest

from cli_invoke import invoke, one_line_error
from lookahead_reasoning.errors import LookaheadError
from lookahead_reasoning.runtime.servers import specs
from lookahead_reasoning.runtime.servers.cpu_dtype import bf16_unit, choose_cpu_dtype, cpu_flags
from lookahead_reasoning.runtime.servers.endpoints import Endpoints, load_endpoints, save_endpoints
from lookahead_reasoning.runtime.servers.specs import LaunchSpec, RoleSpec
from lookahead_reasoning.runtime.servers.starting import ServerGroup

AVX2_HOST = "fpu sse sse2 ssse3 sse4_1 sse4_2 avx avx2 fma".split()
AVX512_HOST = [*AVX2_HOST, "avx512f", "avx512bw", "avx512_vnni"]  # AVX-512 without its bf16 extension
AMX_HOST = [*AVX512_HOST, "avx512_bf16", "amx_bf16", "amx_tile", "amx_int8"]
AVX512_BF16_HOST = [*AVX512_HOST, "avx512_bf16"]


@pytest.mark.parametrize("flags, dtype, reason", [
    (AMX_HOST, "bfloat16", "CPU has AMX-BF16"),
    (AVX512_BF16_HOST, "bfloat16", "CPU has AVX-512-BF16"),
    (AVX2_HOST, "float32", "CPU has no AMX-BF16 or AVX-512-BF16"),
    (AVX512_HOST, "float32", "CPU has no AMX-BF16 or AVX-512-BF16"),
    ([], "float32", "CPU has no AMX-BF16 or AVX-512-BF16"),  # flags unknown: not Linux
])
def test_auto_picks_bfloat16_only_where_the_cpu_has_a_native_unit(flags, dtype, reason):
    choice = choose_cpu_dtype("auto", flags)
    assert (choice.dtype, choice.reason, choice.warning) == (dtype, reason, None)
    assert str(choice) == f"{dtype} ({reason})"


def test_a_named_dtype_is_kept_and_bfloat16_without_a_native_unit_warns_in_one_line():
    assert choose_cpu_dtype("float32", AMX_HOST).dtype == "float32"
    assert choose_cpu_dtype("bfloat16", AMX_HOST).warning is None
    assert choose_cpu_dtype("float32", AVX2_HOST).warning is None
    slow = choose_cpu_dtype("bfloat16", AVX2_HOST)
    assert slow.dtype == "bfloat16" and "\n" not in slow.warning
    assert "emulated" in slow.warning and "slower than float32" in slow.warning
    assert bf16_unit(AVX2_HOST) is None and bf16_unit(AMX_HOST) == "AMX-BF16"


def test_flags_are_read_from_cpuinfo_and_a_missing_file_means_none(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: fpu avx2 amx_bf16\n\nprocessor\t: 1\n")
    assert cpu_flags(cpuinfo) == ["fpu", "avx2", "amx_bf16"]
    assert cpu_flags(tmp_path / "missing") == []


def _group(monkeypatch, flags, log=None, device="cpu", draft_args="", target_args="", **kwargs):
    monkeypatch.setattr(specs, "cpu_flags", lambda: flags)
    launch = LaunchSpec(RoleSpec("tiny-draft", draft_args), RoleSpec("tiny", target_args), device=device, **kwargs)
    return ServerGroup(launch, log=log or (lambda m: None))


def _command(group, role="target"):
    spec = next(s for s in group.plan.specs if role in s.roles)
    spec.model_path = "/models/" + spec.model
    return group.command(spec, 30000)


def _dtypes(command):
    return [command[i + 1] for i, arg in enumerate(command) if arg == "--dtype"] + \
        [arg.split("=", 1)[1] for arg in command if arg.startswith("--dtype=")]


def test_cpu_command_has_the_detected_dtype_once(monkeypatch):
    assert _dtypes(_command(_group(monkeypatch, AMX_HOST))) == ["bfloat16"]
    assert _dtypes(_command(_group(monkeypatch, AVX2_HOST))) == ["float32"]
    assert _dtypes(_command(_group(monkeypatch, AVX2_HOST, dtype="bfloat16"))) == ["bfloat16"]


@pytest.mark.parametrize("args", ["--dtype float32", "--dtype=float32"])
def test_a_dtype_in_the_server_args_wins_and_is_passed_once(monkeypatch, args):
    group = _group(monkeypatch, AMX_HOST, target_args=args, dtype="bfloat16")
    assert _dtypes(_command(group, "target")) == ["float32"]
    assert str(group.plan.dtype_choice(group.plan.specs[0])) == "float32 (given in the server args)"
    assert _dtypes(_command(group, "draft")) == ["bfloat16"]  # the draft's args give none


def test_bfloat16_on_a_cpu_without_a_native_unit_warns_once_per_server(monkeypatch):
    logged = []
    _group(monkeypatch, AVX2_HOST, log=logged.append, draft_args="--dtype bfloat16")
    assert len(logged) == 1 and logged[0].startswith("draft: warning: bfloat16") and "emulated" in logged[0]
    logged.clear()
    _group(monkeypatch, AVX2_HOST, log=logged.append)  # auto: float32, nothing to warn about
    _group(monkeypatch, AMX_HOST, log=logged.append, dtype="bfloat16")
    assert logged == []


def test_gpu_servers_get_no_dtype_and_refuse_a_cpu_dtype(monkeypatch):
    group = _group(monkeypatch, AMX_HOST, device="cuda")
    assert _dtypes(_command(group)) == [] and group.endpoints().target.dtype is None
    with pytest.raises(LookaheadError, match="--dtype sets the dtype of CPU servers"):
        _group(monkeypatch, AMX_HOST, device="cuda", dtype="float32")
    with pytest.raises(LookaheadError, match="--dtype must be one of auto, bfloat16, float32"):
        _group(monkeypatch, AMX_HOST, dtype="fp8")


def test_dry_run_shows_the_dtype_and_why(monkeypatch, capsys):
    monkeypatch.setattr(specs, "cpu_flags", lambda: AMX_HOST)
    out = invoke(capsys, "launch", "--draft", "tiny-draft", "--target", "tiny", "--device", "cpu", "--dry-run")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "# target+judge server (tiny)" and lines[1] == "# dtype: bfloat16 (CPU has AMX-BF16)"
    assert "--device cpu --dtype bfloat16 --disable-overlap-schedule" in lines[2]
    monkeypatch.setattr(specs, "cpu_flags", lambda: AVX2_HOST)
    slow = invoke(capsys, "launch", "--draft", "tiny-draft", "--target", "tiny", "--device", "cpu",
                  "--dtype", "bfloat16", "--dry-run")
    assert "# dtype: bfloat16 (asked with --dtype)" in slow.stdout.splitlines()
    assert [l for l in slow.stderr.splitlines() if "warning" in l] == [
        "target+judge: warning: bfloat16 (asked with --dtype) is emulated on a CPU without AMX-BF16 or "
        "AVX-512-BF16, several times slower than float32",
        "draft: warning: bfloat16 (asked with --dtype) is emulated on a CPU without AMX-BF16 or "
        "AVX-512-BF16, several times slower than float32",
    ]
    one_line_error(invoke(capsys, "launch", "--draft", "tiny-draft", "--target", "tiny", "--device", "cpu",
                          "--dtype", "half", "--dry-run"), "--dtype must be one of")


def test_endpoints_file_records_each_roles_dtype_and_loads_old_files(monkeypatch, tmp_path):
    group = _group(monkeypatch, AMX_HOST, draft_args="--dtype float32")
    written = group.endpoints()
    assert (written.target.dtype, written.judge.dtype, written.draft.dtype) == ("bfloat16", "bfloat16", "float32")
    path = tmp_path / "endpoints.json"
    save_endpoints(written, path)
    assert json.loads(path.read_text())["target"]["dtype"] == "bfloat16"
    assert load_endpoints(path) == written
    old = {role: {"url": "http://127.0.0.1:3000" + str(i), "chat_template": None}
           for i, role in enumerate(("draft", "target", "judge"))}
    path.write_text(json.dumps({**old, "launcher_pid": 1}))
    assert load_endpoints(path).target.dtype is None
    assert Endpoints.model_validate(old).draft.url == "http://127.0.0.1:30000"
