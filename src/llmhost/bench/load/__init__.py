"""The load generator: workloads, arrivals, each API's requests and streams, when a level stops, and the
target's /metrics scraped during a level."""
