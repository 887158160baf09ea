"""Endpoints: several inference components, each with copies pinned to CPUs, behind one router."""
