"""llama.cpp: loading a GGUF, its devices and placement, RPC, the native build, crashes
explained."""
