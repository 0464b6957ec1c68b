"""The package's layers import one way only, and the CLI parses without SGLang."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ["programs", "verifiers", "runtime", "eval", "cli"]  # each may import only itself and those before it


def _imported_layers(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "lookahead_reasoning" and len(parts) > 1 and parts[1] in LAYERS:
                found.add(parts[1])
    return found


@pytest.mark.parametrize("layer", LAYERS)
def test_no_module_imports_a_layer_above_its_own(layer):
    allowed = set(LAYERS[: LAYERS.index(layer) + 1])
    modules = sorted((ROOT / layer).glob("**/*.py"))
    assert modules, f"no modules found under {layer}/"
    upward = {str(m.relative_to(ROOT)): sorted(_imported_layers(m) - allowed) for m in modules}
    assert {m: up for m, up in upward.items() if up} == {}


def test_nothing_imports_the_cli():
    users = [m for layer in LAYERS[:-1] for m in (ROOT / layer).glob("**/*.py") if "cli" in _imported_layers(m)]
    assert users == []


def test_the_walker_sees_upward_imports(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("from lookahead_reasoning.eval.theory import x\nimport lookahead_reasoning.cli.app\n"
                      "from lookahead_reasoning import runtime\n")
    assert _imported_layers(module) == {"eval", "cli", "runtime"}


PARSE_ONLY = """
import sys
from lookahead_reasoning.cli.app import main
try:
    main({args!r})
except SystemExit as exit:
    code = exit.code
loaded = sorted(m for m in ("sglang", "torch", "transformers") if m in sys.modules)
print("LOADED", loaded, file=sys.stderr)
"""


@pytest.mark.parametrize("args", [
    ["--help"], ["run", "--help"], ["launch", "--help"], ["eval", "--help"], ["verifiers", "evaluate", "--help"],
    ["run", "  "], ["run", "q", "--depth", "zero"], ["run", "q", "--endpoints", "/nonexistent/endpoints.json"],
    ["bench", "sim", "--alphas", "1.5"], ["sweep", "--dataset", "gsm8k", "--out", "x", "--width", "0"],
])
def test_cli_parses_and_reports_input_errors_without_sglang(args):
    proc = subprocess.run([sys.executable, "-c", PARSE_ONLY.format(args=args)], capture_output=True, text=True,
                          timeout=120)
    assert "LOADED []" in proc.stderr, proc.stderr
