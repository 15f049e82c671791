"""Whether a draft can serve a target: llama.cpp's own rule (common/speculative.cpp)."""

from __future__ import annotations

from specrun.errors import SpecrunError
from specrun.llama.vocab import Vocabulary

MAX_VOCAB_SIZE_DIFFERENCE = 128
FIRST_COMPARED_TOKEN = 5


def check_compatible(target: Vocabulary, draft: Vocabulary) -> None:
    """llama.cpp's test for a usable draft; the error names what differs."""
    differences = []
    if target.vocab_type != draft.vocab_type:
        differences.append(f"vocabulary type {target.vocab_type} vs {draft.vocab_type}")
    for name, ids, adds in (
        ("BOS", (target.bos, draft.bos), (target.add_bos, draft.add_bos)),
        ("EOS", (target.eos, draft.eos), (target.add_eos, draft.add_eos)),
    ):
        if ids[0] != ids[1]:
            differences.append(f"{name} token {ids[0]} vs {ids[1]}")
        if adds[0] != adds[1]:
            differences.append(f"{name} added {_yes(adds[0])} vs {_yes(adds[1])}")
    if abs(target.n_vocab - draft.n_vocab) > MAX_VOCAB_SIZE_DIFFERENCE:
        differences.append(f"vocabulary size {target.n_vocab} vs {draft.n_vocab}")
    if not differences:
        for token in range(FIRST_COMPARED_TOKEN, min(target.n_vocab, draft.n_vocab)):
            if target.token_text(token) != draft.token_text(token):
                differences.append(
                    f"token {token} is {target.token_text(token)!r} vs {draft.token_text(token)!r}"
                )
                break
    if differences:
        raise SpecrunError(
            f"draft {draft.name} does not match target {target.name}: " + "; ".join(differences)
        )


def _yes(value: bool) -> str:
    return "yes" if value else "no"
