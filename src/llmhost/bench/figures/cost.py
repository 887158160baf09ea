"""Cost figures: time and money to generate 1M tokens.

- Time to generate 1M tokens (minutes) = 1e6 / output tokens per s / 60.
- Cost per 1M tokens = price per hour × that time / 60.
- Blended price per 1M tokens, input:output 3:1 =
  (1 − discount) × price per hour ÷ (total tokens per s × 3600 ÷ 1e6) ÷ 4,
  where total tokens per s = concurrency ÷ p50 TPOT (time per output token after the first).

TPOT, not the gap between streamed events (ITL), sets the per-user token rate: a server that sends
several tokens per event (speculative decoding) has longer gaps but more tokens per gap.
"""

from __future__ import annotations


def minutes_per_1m_tokens(output_tokens_per_s: float) -> float:
    if output_tokens_per_s <= 0:
        raise ValueError("throughput must be positive")
    return 1e6 / output_tokens_per_s / 60.0


def cost_per_1m_tokens(output_tokens_per_s: float, price_per_hour: float) -> float:
    return price_per_hour * minutes_per_1m_tokens(output_tokens_per_s) / 60.0


def total_tokens_per_s(concurrency: float, p50_tpot_s: float) -> float:
    if p50_tpot_s <= 0:
        raise ValueError("time per output token must be positive")
    return concurrency / p50_tpot_s


def blended_price_per_1m_tokens(
    price_per_hour: float, total_tokens_per_s: float, discount: float = 0.0
) -> float:
    if not 0.0 <= discount < 1.0:
        raise ValueError("discount is a rate in [0, 1)")
    if total_tokens_per_s <= 0:
        raise ValueError("throughput must be positive")
    return (1.0 - discount) * price_per_hour / (total_tokens_per_s * 3600.0 / 1e6) / 4.0
