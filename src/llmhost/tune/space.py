"""The deployment space: candidates (copies × threads per copy × max_concurrent × max_batch_tokens,
optionally × quantization × speculation) and which of them fit the host's CPUs."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

# CPUs kept for the endpoint router when a candidate has several copies (the endpoint file's
# router.num_cpus: copies never run there, the router only there). By default none: the router
# shares the copies' CPUs and what it takes from them is inside every figure measured, since each
# candidate is measured through its router. Measured (benchmarks/endpoint_copies.py, 2 copies × 1
# thread, 64-token answers): 34 ms of router CPU per request, 2% of a 2-CPU host at 97 tok/s; two
# copies without the router served 2.3% more tokens/s. Keeping a whole CPU of two for it would cost
# half the host. Keep one where the copies run several threads each, so that the router never
# preempts one thread of a decode step.
DEFAULT_ROUTER_CPUS = 0


@dataclass(frozen=True)
class Candidate:
    """One deployment. ``None`` settings are the server's defaults (the baseline has only those)."""

    copies: int = 1
    threads: int | None = None  # engine threads (and dedicated CPUs) per copy; None: all CPUs
    max_concurrent: int | None = None
    max_batch_tokens: int | None = None
    quant: str | None = None  # None: the model as given; else a GGUF quantized to this type
    speculative: bool = False  # `llmhost serve --speculative ngram`
    baseline: bool = False

    @property
    def name(self) -> str:
        if self.baseline:
            return "baseline"
        parts = [f"x{self.copies}", f"t{self.threads}"]
        parts += [f"mc{self.max_concurrent}"] if self.max_concurrent is not None else []
        parts += [f"b{self.max_batch_tokens}"] if self.max_batch_tokens is not None else []
        parts += [self.quant.lower().replace("_", "")] if self.quant else []
        parts += ["ngram"] if self.speculative else []
        return "-".join(parts)

    def cpus(self, host_cpus: int) -> int:
        return self.copies * (self.threads if self.threads is not None else host_cpus)


@dataclass(frozen=True)
class SearchSpace:
    """The values to explore on each axis; their product is the grid."""

    host_cpus: int
    copies: tuple[int, ...] = (1,)
    threads: tuple[int, ...] = ()  # empty: 1, 2, 4, ... up to the host's CPUs
    max_concurrent: tuple[int, ...] = (1, 4, 8)
    max_batch_tokens: tuple[int, ...] = (512,)
    quants: tuple[str | None, ...] = (None,)
    speculative: tuple[bool, ...] = (False,)
    router_cpus: int = DEFAULT_ROUTER_CPUS
    _threads: tuple[int, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.host_cpus < 1:
            raise ValueError("the host needs at least one CPU")
        if self.router_cpus < 0:
            raise ValueError("router CPUs must be >= 0")
        for axis in ("copies", "threads", "max_concurrent", "max_batch_tokens"):
            values = getattr(self, axis)
            if any(v < 1 for v in values):
                raise ValueError(f"{axis} values must be at least 1, got {list(values)}")
        for axis in ("copies", "max_concurrent", "max_batch_tokens", "quants", "speculative"):
            if not getattr(self, axis):
                raise ValueError(f"{axis}: give at least one value")
        threads = self.threads or _powers_of_two(self.host_cpus)
        object.__setattr__(self, "_threads", tuple(sorted(set(threads))))

    def axes(self) -> dict[str, tuple[object, ...]]:
        """Each axis's values in order, for distances on the grid."""
        return {
            "copies": tuple(sorted(set(self.copies))),
            "threads": self._threads,
            "max_concurrent": tuple(sorted(set(self.max_concurrent))),
            "max_batch_tokens": tuple(sorted(set(self.max_batch_tokens))),
            "quant": tuple(dict.fromkeys(self.quants)),
            "speculative": tuple(dict.fromkeys(self.speculative)),
        }

    def grid(self) -> list[Candidate]:
        a = self.axes()
        return [
            Candidate(c, t, mc, b, q, s)  # type: ignore[arg-type]
            for c, t, mc, b, q, s in itertools.product(*a.values())
        ]

    def baseline_twin(self, defaults: Candidate) -> Candidate | None:
        """The grid candidate with the settings the baseline runs with (``defaults``: `llmhost serve`'s
        max_concurrent and max_batch_tokens, every CPU), if the grid has it."""
        twin = Candidate(1, self.host_cpus, defaults.max_concurrent, defaults.max_batch_tokens)
        return twin if twin in self.grid() else None

    def unfit_reason(self, cand: Candidate) -> str | None:
        """Why ``cand`` cannot run on this host, or ``None`` when it fits."""
        used = cand.cpus(self.host_cpus)
        if cand.copies == 1:
            if used > self.host_cpus:
                return f"{used} threads exceed the host's {self.host_cpus} CPUs"
            return None
        if cand.speculative:
            # a sweep passes extra `llmhost serve` flags to single servers only, not to an endpoint's copies
            return "speculation is measured on single copies only"
        if used + self.router_cpus > self.host_cpus:
            return (
                f"{cand.copies} copies × {cand.threads} CPUs + {self.router_cpus} for the router "
                f"exceed the host's {self.host_cpus} CPUs"
            )
        return None


def _powers_of_two(n: int) -> tuple[int, ...]:
    out, t = [], 1
    while t < n:
        out.append(t)
        t *= 2
    return (*out, n)
