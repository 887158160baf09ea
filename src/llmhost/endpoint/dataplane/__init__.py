"""The endpoint's data plane: the router, which component a request goes to, and the routes it relays
(SageMaker Runtime, Ollama's model routes)."""
