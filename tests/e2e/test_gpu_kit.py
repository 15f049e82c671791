"""The GPU measurement kit (bench/gpu/): its CPU mode end to end on tiny shapes, the real
shapes' sizes against the published files, and the source trim."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from bench.gpu import synthetic, trim

KIT = Path(__file__).resolve().parents[2] / "bench" / "gpu"
# Where bench/native_compare.sh builds the native tools; the kit's CPU mode runs them if there.
NATIVE = Path(os.environ.get("SPECRUN_NATIVE_BIN", "/tmp/specrun-native/build/bin"))
TOOLS = ("llama-completion", "llama-speculative-simple")


@pytest.mark.parametrize(
    "shape, file_type, published_gb",
    [
        # Sizes of the published GGUF files on Hugging Face (Llama 3 8B and 70B Instruct, 3.2 1B
        # Instruct).
        ("llama3-8b", "q4_k_m", 4.92),
        ("llama3-8b", "f16", 16.1),
        ("llama3-70b", "q4_k_m", 42.5),
        ("llama3.2-1b", "q4_0", 0.77),
    ],
)
def test_synthetic_models_are_as_large_as_the_real_ones(
    shape: str, file_type: str, published_gb: float
) -> None:
    size = synthetic.data_bytes(synthetic.SHAPES[shape], file_type) / 1e9
    assert size == pytest.approx(published_gb, rel=0.02)


def test_q4_k_m_keeps_six_bits_where_llama_cpp_does() -> None:
    layout = {
        name: kind for name, _, kind in synthetic.tensors(synthetic.SHAPES["llama3-8b"], "q4_k_m")
    }
    Q = synthetic.Q
    assert layout["output.weight"] == Q.Q6_K and layout["token_embd.weight"] == Q.Q4_K
    six_bit = [i for i in range(32) if layout[f"blk.{i}.ffn_down.weight"] == Q.Q6_K]
    assert six_bit == [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31]
    assert all(layout[f"blk.{i}.attn_q.weight"] == Q.Q4_K for i in range(32))


def test_heads_are_shaped_as_the_published_ones() -> None:
    """EAGLE-3 heads as yuhuili's Llama 3 heads are (config.json of EAGLE3-LLaMA3.1-Instruct-8B
    and EAGLE3-LLaMA3.3-Instruct-70B): one layer at the target's width, fc over three target
    layers, a 32000-token draft vocabulary; the 70B head has its own token embeddings. The MTP
    twin is the dense trunk plus one layer whose active experts are one dense FFN wide."""
    Q = synthetic.Q
    for shape, own in [("llama3-8b", False), ("llama3-70b", True)]:
        dims = synthetic.SHAPES[shape]
        layout = {name: (d, kind) for name, d, kind in synthetic.head_tensors(dims, "f16", own)}
        assert layout["fc.weight"][0] == (dims.n_embd, 3 * dims.n_embd)
        assert layout["blk.0.attn_q.weight"][0] == (dims.n_embd, 2 * dims.n_embd)
        assert layout["output.weight"][0] == (32000, dims.n_embd)
        assert layout["d2t"] == ((32000,), Q.I64)
        assert ("token_embd.weight" in layout) == own
        assert not any(name.startswith("blk.1.") for name in layout)
    assert synthetic.target_layers(32) == [2, 16, 29]
    dims = synthetic.SHAPES["llama3-8b"]
    mtp = {name: d for name, d, _ in synthetic.mtp_tensors(dims, "q4_k_m")}
    trunk = {name for name, _, _ in synthetic.tensors(dims, "q4_k_m")}
    assert {n.replace("ffn_norm", "post_attention_norm") for n in trunk} < set(mtp)
    assert mtp["blk.32.nextn.eh_proj.weight"] == (dims.n_embd, 2 * dims.n_embd)
    experts, width, _ = mtp["blk.32.ffn_gate_exps.weight"]
    assert experts == synthetic.EXPERTS
    assert width * (synthetic.EXPERTS_USED + 1) == dims.n_ff  # routed and shared: one dense FFN


def test_block_drafts_are_shaped_as_the_published_ones() -> None:
    """DFlash drafts as z-lab's (Qwen3-8B-DFlash-b16): fc over 5 target layers spread from
    layer 1 to n - 3 (Qwen3-8B's 36: 1, 9, 17, 25, 33), decoder layers at the target's width
    with q/k norms, no token embeddings or output of their own; DSpark adds a Markov head."""
    assert synthetic.block_target_layers(36) == [1, 9, 17, 25, 33]
    dims = synthetic.SHAPES["llama3-8b"]
    layout = {name: d for name, d, _ in synthetic.block_tensors(dims, "f16", 5)}
    assert layout["fc.weight"] == (dims.n_embd, 5 * dims.n_embd)
    assert layout["blk.0.attn_q_norm.weight"] == (dims.n_embd // dims.n_head,)
    assert "blk.4.ffn_down.weight" in layout and "blk.5.attn_q.weight" not in layout
    assert not {"token_embd.weight", "output.weight", "markov_w1.weight"} & set(layout)
    dspark = {name for name, _, _ in synthetic.block_tensors(dims, "f16", 5, dspark=True)}
    assert {"markov_w1.weight", "markov_w2.weight", "conf_proj.weight"} < dspark


def test_trim_keeps_what_the_build_needs(tmp_path: Path) -> None:
    files = [
        "llama_cpp/llama.py",
        "vendor/llama.cpp/CMakeLists.txt",
        "vendor/llama.cpp/ggml/src/ggml.c",
        "vendor/llama.cpp/ggml/src/ggml-cuda/mmq.cu",
        "vendor/llama.cpp/ggml/src/ggml-vulkan/v.cpp",
        "vendor/llama.cpp/models/ggml-vocab-llama.gguf",
        "vendor/llama.cpp/tools/server/server.cpp",
        "vendor/llama.cpp/tools/completion/completion.cpp",
        "vendor/llama.cpp/docs/build.md",
    ]
    sdist = tmp_path / "sdist.tar.gz"
    with tarfile.open(sdist, "w:gz") as archive:
        for name in files:
            info = tarfile.TarInfo(f"llama_cpp_python-0.0.0/{name}")
            info.size = 4
            archive.addfile(info, io.BytesIO(b"data"))
    dest = tmp_path / "trimmed"
    trim.trim(sdist, dest)
    kept = {str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file()}
    assert kept == {
        "llama_cpp/llama.py",
        "vendor/llama.cpp/CMakeLists.txt",
        "vendor/llama.cpp/ggml/src/ggml.c",
        "vendor/llama.cpp/ggml/src/ggml-cuda/mmq.cu",
        "vendor/llama.cpp/tools/completion/completion.cpp",
        "vendor/llama.cpp/tools/CMakeLists.txt",
        "vendor/llama.cpp/examples/CMakeLists.txt",
    }
    assert (
        "add_subdirectory(completion)"
        in (dest / "vendor/llama.cpp/tools/CMakeLists.txt").read_text()
    )


@pytest.mark.timeout(1300)  # its two runs' own fail-safes, 600 s each (2 min on 2 busy cores)
def test_cpu_mode_measures_end_to_end(tmp_path: Path) -> None:
    """The kit's own command on tiny shapes, with the installed llama-cpp-python, and the
    native peers where bench/native_compare.sh has built them."""
    env = dict(
        os.environ,
        KIT_WORK=str(tmp_path / "work"),
        OUT=str(tmp_path / "out"),
        PYTHON=sys.executable,
    )
    native = all((NATIVE / tool).is_file() for tool in TOOLS)
    command = [str(KIT / "kit.sh"), "run", "--cpu", "--installed"]
    done = subprocess.run(
        command + (["--native", str(NATIVE)] if native else []),
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["machine"]["gpu"] == "none" and "CPU" in results["machine"]["backends"]
    training = json.loads((tmp_path / "out" / "train-rate.json").read_text())
    assert training["shape"] == "tiny" and training["positions_per_second"] > 0
    assert "## EAGLE-3 head training (tiny shape" in (tmp_path / "out" / "results.md").read_text()
    targets = results["targets"]
    assert list(targets) == ["tiny-q4_k_m", "tiny-mtp-q4_k_m", "tiny-f16"]
    assert [list(t["drafts"]) for t in targets.values()] == [
        ["model", "eagle3", "dflash"],
        ["mtp"],
        ["model", "eagle3", "dflash"],
    ]
    for target in targets.values():
        widths = target["verify_ms_by_width"]
        assert list(widths) == [str(w) for w in range(1, 9)] and all(
            ms > 0 for ms in widths.values()
        )
        plain = target["specrun_plain"]
        assert plain["generated"] == 32 and plain["tokens_per_second"] > 0
        assert 0 < plain["loop_share"] < 1
        assert target["backend_sampling"] is False  # auto: whole rows on the CPU
        assert plain["overhead_ms_per_round"] > 0
        assert (target.get("native_plain", {}).get("tokens_per_second", 0) > 0) == native
        for kind, draft in target["drafts"].items():
            if kind == "dflash":  # one pass a round, timed at every γ its block and widths allow
                passes = draft["pass_ms_by_gamma"]
                assert list(passes) == [str(g) for g in range(1, 8)]
                assert all(ms > 0 for ms in passes.values())
            else:
                assert draft["ms_per_token"] > 0
                assert (draft["first_ms"] is None) == (kind == "model")  # a head's takes in
            fixed = draft["specrun_fixed"]
            assert fixed["generated"] == 32 and fixed["tokens_per_second"] > 0
            assert fixed["overhead_ms_per_round"] > 0 and fixed["draft_ms_per_token"] > 0
            assert fixed["acceptance"] is not None
            assert (draft.get("native", {}).get("tokens_per_second", 0) > 0) == native
            # The loop's share of a round, with the draft model (a head's decodes are not
            # told apart from the loop's); greedy, and sampled from a seed.
            for run in [fixed, draft.get("specrun_sampled")] if kind == "model" else []:
                assert 0 < run["loop_share"] < 1 and run["loop_ms_per_round"] > 0
                assert run["generated"] == 32
            if kind != "model":
                assert fixed["loop_share"] is None
            prediction = draft["prediction"]
            assert [row["alpha"] for row in prediction] == [0.5, 0.6, 0.7, 0.8, 0.9]
            gammas = [row["gamma"] for row in prediction]
            assert gammas == sorted(gammas)  # a better draft never makes auto draft less
            assert all(row["speedup"] >= 1.0 for row in prediction)  # γ=0 is always a choice
    report = (tmp_path / "out" / "results.md").read_text()
    assert "CPU only" in report and "## tiny-f16" in report
    assert "the loop's own time a round" in report
    for row in (
        "| specrun γ=4 |",
        "| specrun γ=4 T=0.8 |",
        "| specrun eagle3 γ=4 |",
        "| specrun mtp γ=4 |",
        "| specrun dflash γ=4 |",
    ):
        assert row in report
    if native:
        assert "| native llama-speculative-simple draft-eagle3 γ=4 | " in report
        assert "| native llama-speculative-simple draft-mtp γ=4 | " in report
        assert "| native llama-speculative-simple draft-dflash γ=4 | " in report

    # A second call keeps what the first measured.
    again = subprocess.run(
        command,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert again.returncode == 0 and "tiny-f16: measured before, kept" in again.stdout
