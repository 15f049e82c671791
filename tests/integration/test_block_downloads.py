"""Block drafts (DFlash, DSpark) published as Hugging Face checkpoints: fetched from a Hub on
loopback (tests/support/hubserver.py), converted once with llama.cpp's converter as the EAGLE-3
heads are, recorded in the lock, and found by `--draft dflash`; the real converter on a tiny
DFlash checkpoint where the `convert` extra is installed."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
from huggingface_hub import try_to_load_from_cache
from typer.testing import CliRunner

from specrun.cli.models import app
from specrun.cli.options import ModelRequest
from specrun.core.loop import Round
from specrun.engine import Engine
from specrun.llama.gguf import read_gguf_info
from specrun.models import convert
from specrun.models.catalog import load_catalog, parse_spec
from specrun.models.convert import (
    ConversionError,
    download_sdist,
    llama_version,
    missing_modules,
    unpack_converter,
)
from specrun.models.lock import lock_path
from specrun.options import BlockDraftFile, DraftOptions
from tests.support.hfcache import (
    TINY_HIDDEN,
    TINY_LAYERS,
    fake_checkpoint,
    install_stand_in,
    tiny_eagle3_checkpoint,
    write_target_for_head,
)
from tests.support.hubserver import HubServer
from tests.support.identity import GREEDY
from tests.support.tinymodels import write_tiny_block_draft, write_tiny_eagle3_head

BLOCK = "qwen3-8b-dflash"  # z-lab/Qwen3-8B-DFlash-b16 for qwen3-8b-q4
BLOCK_REPO, BLOCK_TARGET_REPO = "z-lab/Qwen3-8B-DFlash-b16", "Qwen/Qwen3-8B"
TARGET_GGUF = ("Qwen/Qwen3-8B-GGUF", "Qwen3-8B-Q4_K_M.gguf")
TARGET_FILES = [
    "config.json",
    "generation_config.json",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
]


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def one_error_line(result) -> str:
    assert result.exit_code == 1 and result.stdout == "", result.output
    last = result.stderr.splitlines()[-1]
    assert last.startswith("specrun: error: ") and "Traceback" not in result.stderr
    return last


def lock() -> dict:
    return json.loads(lock_path().read_text())["files"]


@pytest.fixture
def checkpoint(hub):
    """The block draft's checkpoint (z-lab's layout: config.json, model.safetensors, the custom
    code the converter does not read) and its target's repo on the Hub."""
    block = {
        "config.json": json.dumps(
            {
                "architectures": ["DFlashDraftModel"],
                "block_size": 16,
                "dflash_config": {"mask_token_id": 151669, "target_layer_ids": [1, 9, 17]},
            }
        ).encode(),
        "model.safetensors": b"the block draft's weights " * 64,
        "dflash.py": b"class DFlashDraftModel: ...",
        "README.md": b"# a model card",
    }
    _, target = fake_checkpoint()
    for name, content in block.items():
        hub.add(BLOCK_REPO, name, content)
    for name, content in target.items():
        hub.add(BLOCK_TARGET_REPO, name, content)
    return block, target


@pytest.fixture
def converter(hf_cache, tmp_path, monkeypatch):
    """llama.cpp's converter stood in for where specrun keeps it (tests/support/hfcache.py):
    returns (install(made), the calls it recorded). It imports nothing of the extra, so the
    pull runs where torch is not installed."""
    monkeypatch.setattr(convert, "CONVERTER_MODULES", ("json",))
    record = tmp_path / "converter-calls.json"

    def install(made: Path | None = None) -> Path:
        made = made or write_tiny_block_draft(tmp_path / "made.gguf")
        return install_stand_in(
            tmp_path / "specrun", llama_version(), mode="convert", source=made, record=record
        )

    def calls() -> list[dict]:
        return json.loads(record.read_text()) if record.exists() else []

    return install, calls


def converted_path() -> Path:
    checkpoint = parse_spec(BLOCK, load_catalog()).checkpoint
    assert checkpoint is not None
    return checkpoint.gguf_path


def resolved_files(hub: HubServer) -> list[str]:
    """The files whose bytes were asked for, as REPO/NAME."""
    return sorted(
        m[1] + "/" + m[2]
        for line in hub.log
        if (m := re.match(r"GET /([^/]+/[^/]+)/resolve/main/(\S+)", line))
    )


def test_pull_of_a_block_draft_fetches_what_the_converter_reads_and_converts_once(
    checkpoint, converter, hub, tmp_path
):
    block_files, target_files = checkpoint
    install, calls = converter
    script = install()
    result = invoke("pull", BLOCK)
    assert result.exit_code == 0, result.output
    path = converted_path()
    assert path == (
        tmp_path
        / "specrun"
        / "converted"
        / "z-lab--Qwen3-8B-DFlash-b16"
        / "for-Qwen--Qwen3-8B"
        / "Qwen3-8B-DFlash-b16.gguf"
    )
    assert result.stdout == f"{BLOCK}: {path}\n"
    assert path.read_bytes() == (tmp_path / "made.gguf").read_bytes()
    # The checkpoint's config and weights and the target's config and tokenizer: not the
    # checkpoint's code or card, nor the target's weights.
    assert resolved_files(hub) == sorted(
        [f"{BLOCK_REPO}/config.json", f"{BLOCK_REPO}/model.safetensors"]
        + [f"{BLOCK_TARGET_REPO}/{name}" for name in TARGET_FILES]
    )
    (call,) = calls()
    argv = call["argv"]
    assert argv[:2] == [sys.executable, str(script)] and argv[3] == "--target-model-dir"
    assert (Path(argv[2]).name, Path(argv[4]).name) == ("Qwen3-8B-DFlash-b16", "Qwen3-8B")
    assert call["head"] == {
        name: [True, block_files[name].hex()] for name in ("config.json", "model.safetensors")
    }
    assert call["target"] == {name: [True, target_files[name].hex()] for name in TARGET_FILES}

    checkpoint_key = f"converted/{parse_spec(BLOCK, load_catalog()).checkpoint.relative_path}"
    record = lock()[checkpoint_key]
    assert record["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert record["source"].startswith(f"converted from {BLOCK_REPO}@")

    requests = len(hub.log)
    again = invoke("pull", BLOCK)
    assert again.exit_code == 0 and again.stdout == result.stdout
    assert len(hub.log) == requests and len(calls()) == 1  # no request, no second conversion
    listed = {row["alias"]: row for row in json.loads(invoke("list", "--json").stdout)}
    assert listed[BLOCK]["cached"] is True and listed[BLOCK]["path"] == str(path)


def test_a_converted_block_draft_is_verified_and_removed_with_its_checkpoint(
    checkpoint, converter, hub, hf_cache
):
    converter[0]()
    path = Path(invoke("pull", BLOCK).stdout.split(": ", 1)[1].strip())
    verified = invoke("verify", BLOCK)
    assert verified.exit_code == 0, verified.output
    assert verified.stdout.startswith(f"{BLOCK}: {path.name}: sha256 ")
    removed = invoke("rm", BLOCK)
    assert removed.exit_code == 0, removed.output
    assert not path.exists()
    assert try_to_load_from_cache(BLOCK_REPO, "model.safetensors", cache_dir=hf_cache) is None
    assert try_to_load_from_cache(BLOCK_TARGET_REPO, "tokenizer.json", cache_dir=hf_cache)


def test_an_output_that_is_not_a_block_draft_is_not_kept(checkpoint, converter, tmp_path):
    converter[0](write_tiny_eagle3_head(tmp_path / "head.gguf"))
    line = one_error_line(invoke("pull", BLOCK))
    assert line == (
        f"specrun: error: {BLOCK_REPO} converted to a eagle3 model, not a DFlash or DSpark block "
        "draft (a checkpoint whose config.json names DFlashDraftModel or a DSpark draft model); "
        "it is not kept"
    )
    assert not converted_path().exists()


def test_draft_dflash_converts_the_targets_block_draft_before_fetching_the_target(
    checkpoint, converter, hub, tiny_target
):
    converter[0]()
    hub.add(*TARGET_GGUF, tiny_target.read_bytes())
    choice = ModelRequest("qwen3-8b-q4", "dflash", None).resolve()
    assert choice.draft == BlockDraftFile(converted_path())
    assert choice.target.name == TARGET_GGUF[1]
    order = [line for line in hub.log if "/resolve/" in line and line.startswith("GET")]
    assert BLOCK_REPO in order[0] and TARGET_GGUF[1] in order[-1]  # the block draft first


# --- the real converter on a tiny DFlash checkpoint ------------------------------------------


@pytest.fixture(scope="session")
def llama_converter(tmp_path_factory) -> Path:
    """llama.cpp's converter of the installed llama-cpp-python, fetched once with pip as specrun
    fetches it; the test is skipped without the `convert` extra or where pip cannot get it."""
    if missing_modules():
        pytest.skip(f"needs {', '.join(missing_modules())}: pip install 'specrun[convert]'")
    folder = tmp_path_factory.mktemp("llama-converter")
    try:
        unpack_converter(download_sdist(llama_version(), folder), folder / "converter")
    except ConversionError as error:
        pytest.skip(str(error))
    return folder / "converter"


def safetensors_bytes(tensors: dict[str, np.ndarray]) -> bytes:
    """A safetensors file (a JSON header of names, dtypes, shapes and offsets, then the data),
    written here: the format is that small, and the converter reads it with its own reader."""
    header: dict[str, object] = {}
    data, offset = [], 0
    for name, tensor in tensors.items():
        raw = np.ascontiguousarray(tensor, np.float16).tobytes()
        header[name] = {
            "dtype": "F16",
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        data.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    return struct.pack("<Q", len(text)) + text + b"".join(data)


def tiny_dflash_checkpoint(n_vocab: int) -> dict[str, bytes]:
    """A tiny DFlash draft in z-lab's layout for the tiny llama target of
    `tiny_eagle3_checkpoint` (TINY_LAYERS layers of TINY_HIDDEN): config.json naming
    DFlashDraftModel with its dflash_config, one Qwen3-style layer, `fc` over two target
    layers, no embeddings or output (the target's are borrowed)."""
    hidden, ff, heads, head_dim = TINY_HIDDEN, 2 * TINY_HIDDEN, 4, TINY_HIDDEN // 4
    layers = [1, 3]  # the target's layers it reads, as the checkpoint numbers them
    config = {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "hidden_size": hidden,
        "intermediate_size": ff,
        "num_hidden_layers": 1,
        "num_attention_heads": heads,
        "num_key_value_heads": heads,
        "head_dim": head_dim,
        "vocab_size": n_vocab,
        "max_position_embeddings": 1024,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "float16",
        "block_size": 8,
        "dflash_config": {"mask_token_id": n_vocab - 1, "target_layer_ids": layers},
    }
    rng = np.random.default_rng(7)

    def w(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape) * 0.08

    tensors = {
        "fc.weight": w(hidden, len(layers) * hidden),
        "hidden_norm.weight": np.ones(hidden),
        "layers.0.input_layernorm.weight": np.ones(hidden),
        "layers.0.self_attn.q_proj.weight": w(heads * head_dim, hidden),
        "layers.0.self_attn.k_proj.weight": w(heads * head_dim, hidden),
        "layers.0.self_attn.v_proj.weight": w(heads * head_dim, hidden),
        "layers.0.self_attn.o_proj.weight": w(hidden, heads * head_dim),
        "layers.0.self_attn.q_norm.weight": np.ones(head_dim),
        "layers.0.self_attn.k_norm.weight": np.ones(head_dim),
        "layers.0.post_attention_layernorm.weight": np.ones(hidden),
        "layers.0.mlp.gate_proj.weight": w(ff, hidden),
        "layers.0.mlp.up_proj.weight": w(ff, hidden),
        "layers.0.mlp.down_proj.weight": w(hidden, ff),
        "norm.weight": np.ones(hidden),
    }
    return {
        "config.json": json.dumps(config).encode(),
        "model.safetensors": safetensors_bytes(tensors),
    }


def test_the_real_converter_makes_a_block_draft_that_drafts_for_its_target(
    hub, hf_cache, tmp_path, llama_converter
):
    """A tiny checkpoint in z-lab's layout, converted by llama.cpp's own converter on `models
    pull` with its target's config and tokenizer, then used through `--draft dflash` with a
    target of that tokenizer: greedy output is the target's own, and the block draft drafts."""
    shutil.copytree(
        llama_converter, tmp_path / "specrun" / "converter" / f"llama-cpp-python-{llama_version()}"
    )
    _, target_files = tiny_eagle3_checkpoint()  # a tiny llama's config and SentencePiece model
    n_vocab = json.loads(target_files["config.json"])["vocab_size"]
    for name, content in tiny_dflash_checkpoint(n_vocab).items():
        hub.add("test/DFlash-tiny", name, content)
    for name, content in target_files.items():
        hub.add("test/tiny-target", name, content)
    target = tmp_path / "tiny-target.gguf"
    catalog = tmp_path / "models.toml"
    catalog.write_text(
        f'[[model]]\nalias = "tiny"\nfamily = "tiny"\nlocal = "{target}"\n'
        'blocks = ["tiny-dflash"]\n'
        '\n[[model]]\nalias = "tiny-dflash"\nkind = "dflash"\nfamily = "tiny"\n'
        'repo = "test/DFlash-tiny"\nformat = "hf"\ntarget_repo = "test/tiny-target"\n'
        'for = ["tiny"]\n'
    )
    pulled = invoke("--catalog", str(catalog), "pull", "tiny-dflash")
    assert pulled.exit_code == 0, pulled.output
    block = Path(pulled.stdout.split(": ", 1)[1].strip())
    info = read_gguf_info(block)
    assert (info.architecture, info.layers, info.vocab_size) == ("dflash", 1, n_vocab)
    write_target_for_head(target, block)
    assert read_gguf_info(target).layers == TINY_LAYERS

    choice = ModelRequest("tiny", "dflash", catalog).resolve()
    assert choice.draft == BlockDraftFile(block)
    with (
        Engine.load(choice.target, params=GREEDY) as plain,
        Engine.load(
            choice.target, choice.draft, params=GREEDY, drafting=DraftOptions(gamma="4")
        ) as speculative,
    ):
        prompt = plain.prompt("the cat and the dog", raw=True)
        expected = [
            t for e in plain.stream(prompt, max_tokens=24) if isinstance(e, Round) for t in e.tokens
        ]
        rounds = [e for e in speculative.stream(prompt, max_tokens=24) if isinstance(e, Round)]
    assert [t for r in rounds for t in r.tokens] == expected
    assert sum(r.drafted for r in rounds) > 0
