"""llmhost: self-hosted, CPU-first LLM endpoints over llama.cpp."""

__version__ = "0.1.0"
