"""LoRA adapters: what `--lora` names, whether an adapter fits its base, those loaded in llama.cpp."""
