"""Generators of the docs site's reference and figures, run by mkdocs at build time (docsgen/hooks.py)
and read by the tests (tests/docs/): what the site says about the code comes from the code."""
