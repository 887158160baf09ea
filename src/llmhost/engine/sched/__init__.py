"""Continuous batching: the sequences as the scheduler sees them, who goes first, what one step plans,
and what a step costs."""
