"""llama.cpp: loading a GGUF, its devices and placement, RPC, the native build, crashes
explained."""

import os

# ggml-vulkan's fused kernels (it reads this once, as it opens a device) crashed lavapipe (Mesa
# 22.3.6 and 25.0.7), or hung it, when a context decoded a suffix after a draft model's context on
# the same device had run: the device tier's chat turns (tests/device/test_offload.py). Off
# unless the user asks for them with SPECRUN_VK_FUSION=1.
if os.environ.get("SPECRUN_VK_FUSION", "").strip() not in ("1", "on", "yes", "true"):
    os.environ.setdefault("GGML_VK_DISABLE_FUSION", "1")
