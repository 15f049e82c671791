"""Token trees against chains at the same verify width: each of prompt lookup and suffix
drafts at a fixed γ (every round verifies γ + 1 rows), as a chain and as a tree, on the agentic
episodes, greedy, the demo pair's target. Tokens a round do not depend on the machine's speed;
tokens per second do (bench/results/trees.txt).

    .venv/bin/python bench/chain_tree.py [--gamma 8] [--leaves 4] [--repeat 1]
"""

from __future__ import annotations

import argparse

from specrun.bench import Mode, load_episodes, run_bench
from specrun.core.sampling import SamplingParams
from specrun.llama.model import Model
from specrun.models.demo import prepare_demo_pair


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gamma", type=int, default=8, help="nodes a round verifies (8)")
    parser.add_argument("--leaves", type=int, default=4, help="a tree's branches (4)")
    parser.add_argument("--repeat", type=int, default=1, help="repetitions (1)")
    parser.add_argument("--tokens", type=int, default=128, help="at most, a request (128)")
    args = parser.parse_args()
    gamma = str(args.gamma)
    modes = [Mode("plain", "none", "0")] + [
        Mode(f"{source}{' tree' * tree} γ={gamma}", f"{source}{'-tree' * tree}", gamma)
        for source in ("lookup", "suffix")
        for tree in (False, True)
    ]
    target_path, _ = prepare_demo_pair()
    with Model(target_path, n_ctx=4096, threads=2, tree_branches=args.leaves) as target:
        result = run_bench(
            target,
            None,
            [],
            modes,
            params=SamplingParams(temperature=0),
            max_tokens=args.tokens,
            repeat=args.repeat,
            gamma_max=args.gamma,
            episodes=load_episodes(),
        )
    for row in result.table:
        print(
            f"{row['class']:>11} {row['mode']:>18} tokens a round {row['mean_accepted_length']:.2f}"
            f"  acceptance {row['acceptance_rate'] or 0:.2f}  {row['tokens_per_second']:.1f} tok/s"
            f"  x{row['speedup'] or 0:.2f} plain"
        )
    print("identical to plain decoding:", result.identical, *result.mismatches, sep="\n  ")


if __name__ == "__main__":
    main()
