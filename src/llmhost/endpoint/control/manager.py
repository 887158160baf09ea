"""The endpoint's control plane: components, their copies and their placement; the checks before anything
starts; scaling by hand and by the autoscaler (`autoscaling.AutoscaleLoop`)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import tempfile
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmhost.endpoint.adapters.check import check_adapters
from llmhost.endpoint.bodies import ComponentState, EndpointState, Rescanned, Unloaded
from llmhost.endpoint.control.adapter_ops import AdapterOps
from llmhost.endpoint.control.autoscaler import ScalerState
from llmhost.endpoint.control.autoscaling import AutoscaleLoop
from llmhost.endpoint.control.component import Component
from llmhost.endpoint.control.modelsdir import scan
from llmhost.endpoint.control.ondemand import ModelPool
from llmhost.endpoint.control.placement import (
    InsufficientCapacityError,
    Ledger,
    can_place,
    place,
    release,
    router_cpu_ids,
)
from llmhost.endpoint.control.replica import Replica, ReplicaState, ReplicaTiming
from llmhost.endpoint.control.variants import Variant, VariantError, VariantSet
from llmhost.endpoint.control_errors import (
    ComponentExistsError,
    ComponentLoadError,
    ModelRefError,
    UnknownComponentError,
)
from llmhost.endpoint.internal import InternalKey
from llmhost.endpoint.spec import ClientKeepAlive, ComponentSpec, EndpointSpec
from llmhost.store.model import ResolvedModel

log = logging.getLogger("llmhost.endpoint")
MMPROJ = "engine.mmproj"


@dataclass
class ManagerTiming:
    autoscale_interval_s: float = 1.0
    drain_timeout_s: float = 120.0  # a stopping copy waits this long for its requests
    replica: ReplicaTiming = field(default_factory=ReplicaTiming)


def resolve(spec: ComponentSpec) -> ResolvedModel:
    """The component's model, found (an s3:// or hf:// one downloaded) and checked, and its adapters
    against it; with its one projector (`mmproj`, a local file), as `llmhost serve` of the reference
    finds it: engine.mmproj resolved, else the one found with the model, unless engine.no_mmproj."""
    from llmhost.engine.llamacpp.gguf_check import GGUFError, check_gguf
    from llmhost.store import resolve as resolve_ref

    engine = spec.engine
    try:
        resolved = resolve_ref(spec.model, projector=not (engine.mmproj or engine.no_mmproj))
        # refused before a copy hands it to llama.cpp; an on-demand model's copy checks it when asked for
        if spec.on_demand is None:
            check_gguf(resolved.gguf)
    except (OSError, GGUFError) as exc:  # ModelNotFoundError and the store's S3 errors among them
        raise ModelRefError(spec.name, f"component {spec.name!r}: model {spec.model!r}: {exc}") from None
    check_adapters(spec.name, spec.adapters, resolved.gguf)
    return dataclasses.replace(resolved, mmproj=_projector(spec, resolved.mmproj))


def _projector(spec: ComponentSpec, found: tuple[str, ...]) -> tuple[str, ...]:
    """The copies' projector file: engine.mmproj's (downloaded here once for every copy), else the one
    found with the model; several found are an error naming them."""
    from llmhost.store.projector import resolve_projector

    if spec.engine.mmproj:
        try:
            return (str(resolve_projector(spec.engine.mmproj)),)
        except OSError as exc:
            raise ModelRefError(spec.name, f"component {spec.name!r}: engine.mmproj {exc}", MMPROJ) from None
    if len(found) > 1:
        raise ModelRefError(
            spec.name,
            f"component {spec.name!r}: model {spec.model!r} comes with {len(found)} multimodal projectors "
            f"({', '.join(found)}): name one as engine: mmproj, or serve text only with engine: no_mmproj",
            MMPROJ,
        )
    return tuple(str(Path(f).absolute()) for f in found)


def with_copies(specs: list[ComponentSpec]) -> list[ComponentSpec]:
    """The components that have copies: each variant's in place of a component with variants."""
    return [v for s in specs for v in (s.variant_specs() if s.variants else [s])]


class EndpointManager:
    def __init__(
        self,
        spec: EndpointSpec,
        ledger: Ledger | None = None,
        log_dir: Path | None = None,
        timing: ManagerTiming | None = None,
    ) -> None:
        self.spec = spec
        self.router_cpus: list[int] = []  # set by check()
        self.ledger = ledger or Ledger.from_host(spec.router.num_cpus)
        self.log_dir = log_dir or Path(tempfile.mkdtemp(prefix=f"llmhost-endpoint-{spec.name}-"))
        self.timing = timing or ManagerTiming()
        self.components: dict[str, Component] = {}
        # each component's model, resolved once (an s3:// model downloaded once) for all its copies
        self._models: dict[str, ResolvedModel] = {}
        # copies accept only this key, which the router sends: a local user cannot go around the router
        self.internal_key = InternalKey.generate()
        self.autoscaling = AutoscaleLoop(self, self.timing.autoscale_interval_s)
        self._autoscaler: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing = False
        self.started_at = time.time()
        self.pool = ModelPool(self, spec.on_demand)
        self.folder: list[ComponentSpec] = []  # the models_dir's components, as last scanned
        self.adapters = AdapterOps(self.components, self.internal_key, self.spawn)

    # --- checks before anything starts -----------------------------------------------------------

    def check(self, specs: list[ComponentSpec] | None = None) -> None:
        """Models resolve and every component's initial copies fit; raises before anything starts."""
        if specs is None:
            self.folder = self.scan_folder()
            specs = [*self.spec.components, *self.folder]
            self._check_preload(specs)
        self.router_cpus = router_cpu_ids(self.spec.router.num_cpus)
        self._check_names(specs)
        # `endpoint up` checks before the server starts, and start() checks again: resolved only once
        self._models.update({s.name: resolve(s) for s in with_copies(specs) if s.name not in self._models})
        self._check_capacity(with_copies(specs))

    def scan_folder(self) -> list[ComponentSpec]:
        """The models_dir's components (none without one); a SpecError names what is wrong."""
        if self.spec.models_dir is None:
            return []
        return scan(self.spec.models_dir, {c.name for c in self.spec.components})

    def _check_preload(self, specs: list[ComponentSpec]) -> None:
        on_demand = {s.name for s in specs if s.on_demand is not None}
        for name in self.spec.on_demand.preload:
            if name not in on_demand:
                known = ", ".join(sorted(on_demand)) or "(none)"
                raise UnknownComponentError(
                    f"on_demand.preload: {name!r} is no on-demand model; on-demand models: {known}"
                )

    def _check_names(self, specs: list[ComponentSpec]) -> None:
        for s in specs:
            if s.name in self.components:
                raise ComponentExistsError(f"component {s.name!r} already exists")

    def _check_capacity(self, specs: list[ComponentSpec]) -> None:
        if reason := can_place(self.ledger, [(s.name, s.resources, s.initial_copies) for s in specs]):
            raise InsufficientCapacityError(reason)

    # --- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start every component's copies one after another, then the autoscaler."""
        # resolved here, on the loop, before anything is served: the components exist (and the
        # router knows them) from the first request on, even while their copies start
        self.check()
        if self.router_cpus:  # before any copy starts: each is then pinned to its own CPUs
            os.sched_setaffinity(0, self.router_cpus)
            log.info("router pinned to CPU(s) %s", ",".join(map(str, self.router_cpus)))
        await self._start_components(self._register([*self.spec.components, *self.folder]))
        self._autoscaler = asyncio.create_task(self.autoscaling.run(), name="autoscaler")
        for name in self.spec.on_demand.preload:
            await self.load(name)

    @property
    def closing(self) -> bool:
        """Shutting down: no copy is started any more."""
        return self._closing

    def spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def add(self, specs: list[ComponentSpec]) -> None:
        """Components added to a running endpoint: resolve the models, check capacity, start copies; then
        the adapter components among them loaded on their bases' copies."""
        specs, adapters = [s for s in specs if s.base is None], specs
        self.adapters.check_components(adapters)
        if specs:
            await self._add(specs)
        await self.adapters.add_components(adapters)

    async def _add(self, specs: list[ComponentSpec]) -> None:
        self._check_names(specs)
        # an s3:// model may take minutes to download: off the event loop, which keeps routing
        models = await asyncio.to_thread(lambda: {s.name: resolve(s) for s in with_copies(specs)})
        self._check_names(specs)  # again: an add beside this one may have taken a name meanwhile
        self._models.update(models)
        await self._start_components(self._register(specs))

    def _register(self, specs: list[ComponentSpec]) -> list[Component]:
        """The components of `specs`, known by name from now on; returns those with copies to start (a
        component with variants has none: its variants' components have them)."""
        self._check_capacity(with_copies(specs))  # again: capacity may have changed since `check`
        named: list[Component] = []
        started: list[Component] = []
        for s in specs:
            if not s.variants:
                named.append(self._component(s, self._models[s.name]))
                started.append(named[-1])
                continue
            members = [self._component(v, self._models[v.name]) for v in s.variant_specs()]
            pairs = zip(s.variants, members, strict=True)
            variants = [Variant(v.name, m, v.weight, v.shadow) for v, m in pairs]
            for m in members:
                m.variant_of = s.name
            model = next(v.component.model for v in variants if v.shadow is None)
            # the variants autoscale, each on its own load: the component itself has nothing to scale
            front = self._component(s.model_copy(update={"autoscaling": None}), model)
            front.variants = VariantSet(s.name, variants)
            named.append(front)
            started += members
        self.components.update((c.spec.name, c) for c in named)
        return started

    def _component(self, spec: ComponentSpec, model: ResolvedModel) -> Component:
        c = Component(spec, model)
        c.on_leave = self._left
        c.on_ready = lambda replica: self.adapters.catch_up(c, replica)
        c.on_failed = lambda replica: self.adapters.start_failed(c, replica)
        return c

    def every(self) -> list[Component]:
        """Every component: those requests name, and their variants' (which have the copies)."""
        return [m for c in self.components.values() for m in (c, *c.members())]

    def _left(self) -> None:
        """A request ended: an on-demand model may be idle (keep_alive 0), room may be free."""
        self.pool.freed()
        self.autoscaling.wake()

    async def _start_components(self, comps: list[Component]) -> None:
        for comp in comps:
            async with comp.lock:
                await self._grow(comp, comp.spec.initial_copies)

    async def shutdown(self) -> None:
        """Drain every copy and stop it."""
        self._closing = True
        if self._autoscaler is not None:
            self._autoscaler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._autoscaler
        await asyncio.gather(
            *(self.stop_copy(c, r) for c in self.every() for r in list(c.replicas)),
            return_exceptions=True,
        )
        for task in list(self._tasks):
            task.cancel()

    # --- scaling ---------------------------------------------------------------------------------

    async def _grow(self, comp: Component, n: int) -> int:
        """Add up to n copies, one after another, each waited for until it passes /ping or fails once."""
        added = 0
        for _ in range(n):
            if self._closing or comp.removing:
                break
            first = self.start_copy(comp)
            added += 1
            if not await first:
                log.warning(
                    "copy %s failed its first start (%s); it keeps restarting",
                    comp.replicas[-1].id,
                    comp.replicas[-1].last_reason,
                )
        return added

    def start_copy(self, comp: Component) -> asyncio.Future[bool]:
        """Place one more copy of `comp` (InsufficientCapacityError if it does not fit) and start it; the
        future says whether its first start passed /ping."""
        alloc = place(self.ledger, comp.name, comp.spec.resources)
        replica = Replica(
            comp.spec,
            comp.new_index(),
            comp.model,
            alloc,
            self.log_dir,
            on_change=comp.notify,
            timing=self.timing.replica,
            internal_key=self.internal_key,
            adapters=comp.startable_adapters,
            served_name=comp.served_name,
        )
        comp.replicas.append(replica)
        return replica.start()

    async def stop_copy(self, comp: Component, replica: Replica) -> None:
        await replica.stop(self.timing.drain_timeout_s)
        release(self.ledger, replica.alloc)
        if replica in comp.replicas:
            comp.replicas.remove(replica)
        comp.notify()
        self.pool.freed()

    async def _shrink(self, comp: Component, n: int) -> None:
        """Drain and stop n copies: failed ones first, then starting, then the least loaded."""
        order = {ReplicaState.FAILED: 0, ReplicaState.STARTING: 1, ReplicaState.READY: 2}
        victims = sorted(comp.capacity(), key=lambda r: (order[r.state], r.outstanding, -r.index))[:n]
        for r in victims:
            r.state = ReplicaState.DRAINING  # out of routing at once; stop() drains
        await asyncio.gather(*(self.stop_copy(comp, r) for r in victims))

    async def scale(self, name: str, copies: int) -> ComponentState:
        comp = self.get(name)
        if copies < 0:
            raise ValueError(f"copies must be >= 0, got {copies}")
        if comp.variants is not None:
            raise ValueError(
                f"component {name!r} has variants, which have the copies: scale one of "
                f"{', '.join(m.name for m in comp.members())}"
            )
        if comp.demand is not None:
            raise ValueError(
                f"component {name!r} is loaded on demand (one copy): use `llmhost endpoint load` or `unload`"
            )
        async with comp.lock:
            current = len(comp.capacity())
            if copies > current:
                reason = can_place(self.ledger, [(name, comp.spec.resources, copies - current)])
                if reason is not None:
                    raise InsufficientCapacityError(reason)
                await self._grow(comp, copies - current)
            elif copies < current:
                await self._shrink(comp, current - copies)
            now = time.monotonic()
            comp.scaler = ScalerState(last_scale_out=now, last_scale_in=now)
        return comp.status()

    async def remove(self, name: str) -> None:
        """Stop routing new requests to `name`, drain its copies, stop them, forget it (an adapter
        component: unloaded from its base's copies)."""
        if await self.adapters.removed(name):
            return
        comp = self.get(name)
        if comp.variant_of is not None:
            raise ValueError(
                f"{name!r} is a variant of component {comp.variant_of!r}: remove the component, or give "
                "the variant weight 0 (`llmhost endpoint weights`)"
            )
        parts = [comp, *comp.members()]
        for c in parts:
            c.removing = True
            c.notify()
        async with comp.lock:
            await asyncio.gather(*(self.stop_copy(c, r) for c in parts for r in list(c.replicas)))
        self.components.pop(name, None)
        for c in parts:  # a component added later under this name resolves its own model
            self._models.pop(c.name, None)
        self.pool.freed()

    def weights(self, name: str, weights: dict[str, float]) -> ComponentState:
        """Set some of a component's variants' weights (a shadow's: its percent), as SageMaker's
        UpdateEndpointWeightsAndCapacities does; the next request is routed by them."""
        comp = self.get(name)
        if comp.variants is None:
            why = f"a variant of {comp.variant_of!r}" if comp.variant_of else "a component without variants"
            raise VariantError("component", f"component {name!r} is {why}: it has no variant weights")
        comp.variants.set_weights(weights)
        log.info("component %s: variant weights set: %s", name, weights)
        return comp.status()

    # --- on-demand models ------------------------------------------------------------------------

    def on_demand(self, name: str) -> Component:
        comp = self.get(name)
        if comp.demand is None:
            raise ValueError(
                f"component {name!r} has copies of its own, it is not loaded on demand: use "
                "`llmhost endpoint scale`"
            )
        return comp

    async def load(self, name: str) -> ComponentState:
        """Load an on-demand model as a request would (making room), and wait for it."""
        comp = self.on_demand(name)
        never = self.pool.never_fits(comp)
        if never is not None:
            raise InsufficientCapacityError(never)
        self.pool.want(comp)
        demand = comp.demand
        assert demand is not None
        if demand.loading is not None:
            await asyncio.shield(demand.loading)
        if demand.refusal is not None and not comp.ready():
            raise ComponentLoadError(demand.refusal.message)
        return comp.status()

    async def unload(self, name: str) -> Unloaded:
        """Drain and stop an on-demand model's copy (a pinned one too)."""
        comp = self.on_demand(name)
        unloaded = await self.pool.unload(comp, "admin")
        return {"unloaded": name if unloaded else None, "state": comp.state.value}

    async def reload(self) -> Rescanned:
        """Scan the models_dir again: new models are added (unloaded), those gone removed (drained), and
        those whose settings changed replaced."""
        if self.spec.models_dir is None:
            raise ValueError("this endpoint has no models_dir to scan")
        folder = await asyncio.to_thread(self.scan_folder)
        old = {s.name: s for s in self.folder}
        new = {s.name: s for s in folder}
        gone = [n for n in old if n not in new or new[n] != old[n]]
        self._check_names([s for s in folder if s.name not in old])  # e.g. a component added by `add`
        for name in gone:
            if name in self.components:
                await self.remove(name)
        added = [s for s in folder if s.name not in old or old[s.name] != s]
        models = await asyncio.to_thread(lambda: {s.name: resolve(s) for s in added})
        self._models.update(models)
        self._register(added)
        self.folder = folder
        changed = sorted(n for n in gone if n in new)
        return {
            "added": sorted(s.name for s in added if s.name not in changed),
            "removed": sorted(n for n in gone if n not in new),
            "changed": changed,
        }

    def get(self, name: str) -> Component:
        """A component by name: one that requests name, or a variant's (COMPONENT:VARIANT)."""
        comp = self.components.get(name) or next((c for c in self.every() if c.name == name), None)
        if comp is None or comp.removing:
            known = ", ".join(sorted(self.components)) or "(none)"
            raise UnknownComponentError(f"unknown inference component {name!r}; known components: {known}")
        return comp

    # --- autoscaling -----------------------------------------------------------------------------

    @property
    def client_keep_alive(self) -> ClientKeepAlive:
        return self.spec.on_demand.client_keep_alive

    def copy_wanted(self, component: Component) -> None:
        if component.demand is not None:
            self.pool.want(component)
        else:
            self.autoscaling.wake()

    def wait_timeout_s(self, component: Component) -> float:
        if not component.capacity():  # scaled to zero: the first copy has to start
            spec = component.spec
            # an on-demand model may first wait for room (up to max_wait_s, then refused)
            room = spec.max_wait_s if component.demand is not None else 0.0
            return spec.startup_health_check_timeout_s + room
        return component.spec.max_wait_s

    async def resize(self, comp: Component, desired: int) -> None:
        """Grow or shrink `comp` to `desired` copies (the autoscaler's decision); one that no longer
        fits is logged, not raised: the next look decides again."""
        async with comp.lock:
            current = len(comp.capacity())
            try:
                if desired > current:
                    await self._grow(comp, desired - current)
                elif desired < current:
                    await self._shrink(comp, current - desired)
            except InsufficientCapacityError as exc:
                log.warning("autoscaling %s: %s", comp.name, exc)

    # --- views -----------------------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        """Requests at the router, waiting ones included."""
        return sum(c.in_flight for c in self.every())

    def status(self) -> EndpointState:
        return {
            "name": self.spec.name,
            "instance": self.spec.instance.model_dump(),
            "uptime_s": round(time.time() - self.started_at, 1),
            "cpus": self.ledger.cpus,
            "router_cpus": self.router_cpus,
            "memory_mb": self.ledger.memory_mb,
            "memory_reserved_mb": self.ledger.reserved_mb,
            "log_dir": str(self.log_dir),
            "models_dir": self.spec.models_dir.path if self.spec.models_dir else None,
            "on_demand": self.spec.on_demand.model_dump(),
            "components": [c.status() for c in self.every()],
            "adapter_components": [{"name": n, "base": b} for n, b in self.adapters.adapter_components()],
        }
