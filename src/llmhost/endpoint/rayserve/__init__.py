"""`llmhost endpoint up --ray`: the same endpoint file as a Ray Serve application across many hosts.

The only part of llmhost that imports Ray (`pip install 'llmhost[ray]'`); nothing outside this package
imports it, and `llmhost.endpoint.cli` imports this package only for `--ray`.
"""
