"""The CPU build's answers, for the device tier to hold the Vulkan build's against: run by the
CPU environment's interpreter (`python -m tests.device.reference` with a JSON request on
stdin), it prints each prompt's greedy tokens and the logits of the prompt's last position.

    {"target": PATH, "prompts": [TEXT or [TOKEN, ...], ...], "tokens": N, "grammar": GBNF}

(the grammar optional: constrained answers where it is given).
"""

from __future__ import annotations

import json
import sys

from specrun.core.loop import Round, generate
from specrun.llama.devices import build_info
from specrun.llama.grammar import Grammar
from specrun.llama.model import Model
from tests.support.identity import GREEDY, greedy_tokens


def main() -> None:
    request = json.load(sys.stdin)
    with Model(request["target"], n_ctx=request.get("n_ctx", 512), gpu_layers=0) as target:
        prompts = [p if isinstance(p, list) else target.tokenize(p) for p in request["prompts"]]
        if "grammar" in request:
            greedy = [
                [
                    t
                    for e in generate(
                        target,
                        p,
                        params=GREEDY,
                        max_tokens=request["tokens"],
                        constraint=Grammar(target, request["grammar"]),
                    )
                    if isinstance(e, Round)
                    for t in e.tokens
                ]
                for p in prompts
            ]
        else:
            greedy = [greedy_tokens(target, p, max_tokens=request["tokens"])[0] for p in prompts]
        logits = [target.logits(p, 1)[0].tolist() for p in prompts]
    json.dump(
        {"backends": list(build_info().backends), "greedy": greedy, "logits": logits}, sys.stdout
    )


if __name__ == "__main__":
    main()
