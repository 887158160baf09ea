"""ASGI app: SageMaker (/ping, /invocations), OpenAI (/v1/*), TGI, tokenizer, /health, /metrics."""

from llmhost.server.app import create_app
from llmhost.server.settings import ServerSettings

__all__ = ["ServerSettings", "create_app"]
