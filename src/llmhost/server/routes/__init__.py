"""Thin routers: parse, call the serving layer, return."""
