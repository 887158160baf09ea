"""llama.cpp itself: the backend, the model and its context, sequence state in and out, GGUF files
checked and read, LoRA adapters checked against their base and loaded."""
