"""specrun: exact speculative decoding for GGUF models over llama.cpp.

The engine is a library; the CLI and the TUI are thin consumers of its event stream.

    import specrun
    with specrun.Engine.load("target.gguf", "draft.gguf") as engine:
        for event in engine.stream("Why is the sky blue?", max_tokens=64):
            if isinstance(event, specrun.Round):
                print(event.text, end="", flush=True)

Lower level: `Model` (one GGUF over llama.cpp), `generate` (the round loop),
`ModelDraft` (a draft source), `SamplingParams`, the γ policies and `Stats`.
"""

from specrun.core.drafting import DraftSource, ModelDraft, Proposal
from specrun.core.gamma import AdaptiveGamma, FixedGamma, HeuristicGamma, parse_policy
from specrun.core.loop import Event, Prefill, Round, generate
from specrun.core.sampling import SamplingParams
from specrun.core.stats import Stats
from specrun.engine import Engine
from specrun.errors import SpecrunError
from specrun.llama.compat import check_compatible
from specrun.llama.model import Model
from specrun.options import PROMPT_LOOKUP, DraftOptions, LoadOptions, LookupOptions

__all__ = [
    "PROMPT_LOOKUP",
    "AdaptiveGamma",
    "DraftOptions",
    "DraftSource",
    "Engine",
    "Event",
    "FixedGamma",
    "HeuristicGamma",
    "LoadOptions",
    "LookupOptions",
    "Model",
    "ModelDraft",
    "Prefill",
    "Proposal",
    "Round",
    "SamplingParams",
    "SpecrunError",
    "Stats",
    "check_compatible",
    "generate",
    "parse_policy",
]
__version__ = "0.1.0"
