"""Settings declared once (`setting`), `llmhost serve`'s (`serve`), as CLI option groups (`cli`), and
built into the server's settings and its one EngineConfig (`build`)."""
