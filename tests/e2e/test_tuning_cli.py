"""llama.cpp's memory and speed flags on specrun's command line: bad values are one line
(exit 2) before anything loads, and good ones run, a context past the trained one said."""

from __future__ import annotations

import pytest

from tests.support.cli import specrun


def usage_error(*args: str) -> str:
    """The one `specrun: error:` line of a bad option (exit 2)."""
    result = specrun(*args)
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if not line.startswith("specrun: ")]
    errors = [line for line in result.stderr.splitlines() if line.startswith("specrun: error: ")]
    assert result.returncode == 2 and result.stdout == "" and not lines, result.stderr
    assert len(errors) == 1, result.stderr
    return errors[0].removeprefix("specrun: error: ")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["-ctk", "q9"],
            "--cache-type-k must be one of f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, "
            "q5_1, got 'q9'",
        ),
        (
            ["--cache-type-v", "q8_0", "-fa", "off"],
            "a quantized V cache (--cache-type-v q8_0) needs flash attention, as in llama.cpp: "
            "use --flash-attn on or auto",
        ),
        (["--flash-attn", "yes"], "--flash-attn must be on, off or auto, got 'yes'"),
        (["--rope-scaling", "ntk"], "--rope-scaling must be none, linear or yarn, got 'ntk'"),
        (["--rope-scale", "0.5"], "--rope-scale must be at least 1, got 0.5"),
        (
            ["--rope-scale", "2", "--rope-freq-scale", "0.5"],
            "--rope-scale N is --rope-freq-scale 1/N: give one of them",
        ),
    ],
)
def test_bad_values_are_one_line_before_loading(tiny_target, flags, message):
    assert usage_error("run", "-t", str(tiny_target), "-n", "1", *flags, "hi") == message


def test_a_quantized_cache_the_heads_cannot_take_is_refused(tiny_target):
    assert usage_error("run", "-t", str(tiny_target), "-ctk", "q8_0", "-n", "1", "hi") == (
        "--cache-type-k q8_0 stores blocks of 32 values, which do not divide target.gguf's "
        "attention heads of 16: use f16, or a type of smaller blocks"
    )


def test_a_context_past_the_trained_one_needs_a_factor(tiny_target):
    run = ["run", "-t", str(tiny_target), "-d", "none", "--threads", "1", "-n", "2"]
    assert usage_error(*run, "--ctx", "4096", "--rope-scaling", "yarn", "hi") == (
        "--ctx 4096 is more than target.gguf was trained for (1024): --rope-scaling yarn "
        "needs a factor to reach it, e.g. --rope-scale 4"
    )
    stretched = specrun(*run, "--ctx", "8192", "--rope-scaling", "yarn", "--rope-scale", "4", "hi")
    assert stretched.returncode == 0 and stretched.stdout.strip(), stretched.stderr
    assert (
        "specrun: --ctx 8192 is more than target.gguf reaches with its RoPE scaling (4096); "
        "using 4096"
    ) in stretched.stderr.splitlines()
