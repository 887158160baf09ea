"""Choosing each next token: sampling parameters and the sampler chain, grammar constraints, a thinking
model's thought, and n-gram speculation."""
