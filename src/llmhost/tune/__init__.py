"""``llmhost tune``: search the deployment space on this host for a model, a workload and an SLO,
and hand back an endpoint file with the evidence (tune.json, report.html).

Modules: ``space`` (candidates, what fits the host), ``slo`` (the SLO and each level's verdict),
``state`` (candidate lifecycle, the choice), ``search`` (corners, pruning, refinement), ``runner``
(measuring over HTTP with the sweep machinery, the time budget), ``outputs`` and ``report``.
"""

from llmhost.tune.runner import Tuner, TuneSettings, Workload
from llmhost.tune.slo import TuneSLO
from llmhost.tune.space import DEFAULT_ROUTER_CPUS, Candidate, SearchSpace

__all__ = ["DEFAULT_ROUTER_CPUS", "Candidate", "SearchSpace", "TuneSLO", "TuneSettings", "Tuner", "Workload"]
