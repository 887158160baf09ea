"""What a measurement means: per-request and per-level figures, SLOs, saturation, cost, recommendations,
comparisons and charts."""
