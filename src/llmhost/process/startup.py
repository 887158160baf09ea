"""The garbage collector held off while a process starts.

Starting `llmhost serve` or a router imports FastAPI, pydantic and ~200 protocol models and builds the
app: hundreds of thousands of objects, all kept for the life of the process. The collector, left on,
walks them again and again as they pile up (a full collection each time the older generations fill);
measured on a `llmhost serve` start of the default model, that was ~0.1 CPU-s of its ~1.7, paid by
every endpoint copy and every scale-up. So collection waits until the process is built, and what
was built then is frozen out of the generations the collector walks from then on.
"""

from __future__ import annotations

import gc


def hold() -> None:
    """Called first: nothing is collected until `release`."""
    gc.disable()


def release() -> None:
    """Called once the process is built, before it serves or runs its command: what exists now stays
    out of every later collection, and collection resumes. Idempotent."""
    if not gc.isenabled():
        gc.freeze()
        gc.enable()
