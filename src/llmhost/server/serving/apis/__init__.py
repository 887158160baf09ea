"""Each API over the shared chat path: OpenAI (completions, chat, responses, embeddings, tokenizer),
Anthropic, Ollama, TGI, SageMaker's /invocations and Runtime."""
