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

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from specrun.core.drafting import DraftSource, ModelDraft, Proposal
    from specrun.core.gamma import AdaptiveGamma, FixedGamma, HeuristicGamma, parse_policy
    from specrun.core.loop import Event, Prefill, Round, generate
    from specrun.core.sampling import SamplingParams
    from specrun.core.stats import Stats
    from specrun.core.suffix import SuffixDraft, SuffixStore
    from specrun.engine import Engine
    from specrun.errors import SpecrunError
    from specrun.llama.compat import check_compatible
    from specrun.llama.grammar import JSON_GRAMMAR, schema_grammar
    from specrun.llama.model import Model
    from specrun.options import PROMPT_LOOKUP, SUFFIX, DraftOptions, LoadOptions, LookupOptions

# Imported when first used, not with the package: the `specrun` command installs its signal
# policy before llama.cpp and numpy load, so that a Ctrl-C in its first moments is no
# traceback (specrun.__main__).
_HOMES = {
    "specrun.core.drafting": ("DraftSource", "ModelDraft", "Proposal"),
    "specrun.core.gamma": ("AdaptiveGamma", "FixedGamma", "HeuristicGamma", "parse_policy"),
    "specrun.core.loop": ("Event", "Prefill", "Round", "generate"),
    "specrun.core.sampling": ("SamplingParams",),
    "specrun.core.stats": ("Stats",),
    "specrun.core.suffix": ("SuffixDraft", "SuffixStore"),
    "specrun.engine": ("Engine",),
    "specrun.errors": ("SpecrunError",),
    "specrun.llama.compat": ("check_compatible",),
    "specrun.llama.grammar": ("JSON_GRAMMAR", "schema_grammar"),
    "specrun.llama.model": ("Model",),
    "specrun.options": ("PROMPT_LOOKUP", "SUFFIX", "DraftOptions", "LoadOptions", "LookupOptions"),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}

__all__ = [
    "JSON_GRAMMAR",
    "PROMPT_LOOKUP",
    "SUFFIX",
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
    "SuffixDraft",
    "SuffixStore",
    "check_compatible",
    "generate",
    "parse_policy",
    "schema_grammar",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    home = _HOME_OF.get(name)
    if home is None:
        raise AttributeError(f"module 'specrun' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # once: the next lookup finds it without this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
