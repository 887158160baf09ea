"""Continuous batching: which tokens go into the next llama_decode.

The scheduler returns plain data (a StepPlan); it never touches llama.cpp or HTTP.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import replace

from llmhost.engine.config import EngineConfig
from llmhost.engine.kv.host_cache import HostCache, HostMatch, StateKey
from llmhost.engine.kv.prefix_cache import (
    KvOp,
    KvRestore,
    KvTrim,
    PrefixCache,
    common_prefix_len,
    kv_ids,
    reusable,
)
from llmhost.engine.lora import AdapterSet, label, next_turn
from llmhost.engine.media import media_floor, next_span_start, span_at
from llmhost.engine.sample.speculative import blend
from llmhost.engine.sched.policy import admission_rank, prefill_shares
from llmhost.engine.sched.sequence import SeqStatus, Sequence
from llmhost.engine.sched.step_cost import StepCost
from llmhost.engine.sched.step_plan import BatchItem, StepPlan, StepWidth

# weight of the latest draft in the acceptance rate of all sequences together
ENGINE_ACCEPTANCE_WEIGHT = 0.1
# guesses expected to be confirmed, per guess, before any sequence has drafted
PRIOR_ACCEPTANCE = 0.5


def even_drafts(items: list[BatchItem]) -> list[BatchItem]:
    """The n-gram drafts of a step's decoding sequences, cut to the shortest of them (none when one
    sequence has none). With a KV stream per sequence llama.cpp runs a step whose sequences carry
    different numbers of tokens as several micro-batches, one per length: a draft beside sequences
    without one costs a micro-batch of its own. Measured before this cut (2 cores, 8 sequences,
    `benchmarks/speculation_default.py`): adaptive speculation 0.88x the output tokens/s of none
    where answers quote the prompt, 0.71x where they do not."""
    if len(items) < 2 or any(i.seq.drafted for i in items):
        return items
    n = min(len(i.draft) for i in items)
    cut = [replace(i, tokens=i.tokens[: 1 + n], draft=i.draft[:n]) if len(i.draft) > n else i for i in items]
    return cut


def prefill_item(seq: Sequence, n: int) -> BatchItem:
    """The next `n` prompt tokens of `seq` to compute, cut before its next medium; a medium starting
    there is computed whole, on its own (its embeddings are decoded in a llama_decode of their own)."""
    start = seq.n_computed
    if seq.media:
        span = span_at(start, seq.media)
        if span is not None:
            return BatchItem(seq, seq.prompt[start : span.end], start, sample=False, media=span)
        following = next_span_start(start, seq.media)
        if following is not None:
            n = min(n, following - start)
    chunk = seq.prompt[start : start + n]
    done = start + len(chunk) == len(seq.prompt)
    return BatchItem(seq, chunk, start, sample=done and seq.max_tokens > 0)


class Scheduler:
    """`host`: the host-memory cache tier (None: off), whose states are valid under `state_key`;
    `reach`: the longest reusable prefix of a KV sequence's first positions (see PrefixCache);
    `prompt_rows`: prompt positions a step computes for prompt logprobs, all sequences together (the
    model's `EngineConfig.prompt_logits_rows`; None: as many as the step's budget takes)."""

    def __init__(
        self,
        config: EngineConfig,
        host: HostCache | None = None,
        state_key: StateKey | None = None,
        reach: Callable[[int, int], int] | None = None,
        prompt_rows: int | None = None,
    ) -> None:
        self.config = config
        self.prompt_rows = prompt_rows if prompt_rows is not None else config.max_batch_tokens
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.host = host
        self.state_key = state_key or StateKey("")
        spill = host.min_tokens if host is not None else 0
        self.cache = PrefixCache(config.max_concurrent, config.prefix_cache_seqs, spill, reach)
        self._pending_ops: list[KvOp] = []
        # what a token of a decode step costs: whether a sequence's guesses pay for their place
        self.step_cost = StepCost()
        # share of recent n-gram guesses confirmed, all sequences together (None before the first)
        self.draft_acceptance: float | None = None
        # the adapter set the last step ran: the next step runs the next set that has work
        self._last_adapters: AdapterSet | None = None

    # -- admission -------------------------------------------------------------------------------
    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def can_admit(self) -> bool:
        return len(self.running) < self.config.max_concurrent and self.cache.can_acquire()

    def leaves_room(self, seq: Sequence) -> bool:
        """Whether admitting `seq` now keeps `interactive_slots` sequences free for interactive requests
        (batch work, priority > 0, is held back; at least one sequence is always its to take)."""
        if seq.priority <= 0:
            return True
        reserve = min(self.config.interactive_slots, self.config.max_concurrent - 1)
        return len(self.running) < self.config.max_concurrent - reserve

    def admit(self, seq: Sequence, now_s: float) -> list[KvOp]:
        """Give `seq` a KV sequence holding the longest prefix of its prompt at hand: shared from the
        context, else restored from host memory where that spares more prefill."""
        running = self._running_kv(seq.adapters)
        reuse = self.config.prefix_caching and not seq.prompt_logprobs
        saved = self._host_match(seq, running) if reuse else None
        match = self.cache.acquire(seq.prompt, running, reuse=reuse and saved is None, adapters=seq.adapters)
        ops = list(match.ops)
        n_reused = match.n_reused
        if saved is not None and self.host is not None:
            n_reused = reusable(saved.n_tokens, seq.prompt)
            data = self.host.restore(saved, n_reused)
            swa = saved.checkpoint.data if saved.checkpoint is not None else b""
            ops.append(KvRestore(match.kv_seq, n_reused, data, saved.n_state_tokens, swa))
        floor = media_floor(n_reused, seq.media)
        if floor < n_reused:  # a prefix ending inside a medium: it is decoded again, whole
            ops.append(KvTrim(match.kv_seq, floor))
            n_reused = floor
        seq.kv_seq = match.kv_seq
        seq.n_computed = seq.n_reused = n_reused
        seq.restored = saved is not None
        seq.status = SeqStatus.PREFILL
        seq.admitted_s = now_s
        self.running.append(seq)
        return ops

    def _running_kv(self, adapters: AdapterSet) -> list[tuple[int, list[int]]]:
        """(kv_seq, computed tokens) of the running sequences whose KV a prompt of `adapters` may share."""
        return [(s.kv_seq, s.computed_tokens) for s in self.running if s.adapters == adapters]

    def state_key_for(self, adapters: AdapterSet) -> StateKey:
        """What a state computed with `adapters` is saved and looked up under in host memory."""
        return replace(self.state_key, adapters=label(adapters))

    def _host_match(self, seq: Sequence, running: list[tuple[int, list[int]]]) -> HostMatch | None:
        """A saved state worth restoring: it spares at least `min_tokens` more prefill than the
        longest prefix still in the context (the last prompt token is always decoded)."""
        if self.host is None:
            return None
        prompt = seq.prompt
        saved = self.host.lookup(self.state_key_for(seq.adapters), prompt)
        if saved is None:
            return None
        _, in_context, _ = self.cache.best_match(prompt, running, seq.adapters)
        gain = reusable(saved.n_tokens, prompt) - reusable(in_context, prompt)
        return saved if gain >= self.host.min_tokens else None

    def prefix_lost(self, kv_seq: int) -> Sequence | None:
        """The prefix planned for `kv_seq` is not in the context (llama.cpp refused its restore, it was
        to be copied from one so refused, or its sliding-window cells went to other sequences): its
        sequence prefills its whole prompt, and the prefix is no longer counted as reused."""
        for seq in self.running:
            if seq.kv_seq == kv_seq:
                if seq.n_reused and seq.restored and self.host is not None:
                    self.host.uncount(seq.n_reused)
                elif seq.n_reused:
                    self.cache.reuse_lost(seq.n_reused)
                seq.n_computed = seq.n_reused = 0
                seq.restored = False
                return seq
        return None

    def _next_admission(self) -> tuple[Sequence | None, list[Sequence]]:
        """The waiting sequence of the lowest priority that the schedule policy ranks first (earliest
        first among equals); one passed over `max_concurrent` times goes first among its priority
        whatever it costs. Sequences about to share a prefix still being computed are left waiting for it.
        Priority comes first so that queued batch work never delays an interactive request's admission.

        fewest-left (default): the fewest prompt tokens left to compute (prefix in the context or in
        host memory), so a conversation's next turn is not queued behind cold prompts; arrival: the
        earliest; cached-first: the most prompt tokens at hand (conversations under way first).
        Measured (`benchmarks/conversations.py`, 2 cores): arrival order at 32 users cut later-turn
        TTFT p90 from 17.9-18.2 to 13.9-14.2 s, but at 12 users raised p90 from 1.14-1.23 to
        1.48-1.63 s and first-turn p50 from 1.7 to 2.3-2.7 s; cached-first at 32 users gave later-turn
        p50 7.56 s against 13.27 s for first-turn p50 10.5 s against 9.5 s.

        Also the sequences ahead of it in arrival order that it goes before (each passed over once more
        if it is admitted)."""
        best: Sequence | None = None
        best_key: tuple[int, int, float] | None = None
        considered: list[Sequence] = []
        for position, seq in enumerate(self.waiting):
            at_hand = self._prefix_at_hand(seq, self._running_kv(seq.adapters))
            if self._should_wait_for_prefix(seq, at_hand):
                continue
            if seq.passed_over >= self.config.max_concurrent:
                key = (seq.priority, 0, float(position))
            else:
                key = (seq.priority, 1, admission_rank(self.config.schedule_policy, seq, at_hand))
            if best_key is None or key < best_key:
                best, best_key = seq, key
            considered.append(seq)
        passed = considered[: considered.index(best)] if best is not None else []
        return best, passed

    def _prefix_at_hand(self, seq: Sequence, running: list[tuple[int, list[int]]]) -> int:
        """Leading prompt tokens `seq` would not compute if admitted now: held in the context or in
        host memory (none for a sequence needing every prompt position's logits)."""
        if seq.prompt_logprobs:
            return 0
        _, shared, _ = self.cache.best_match(seq.prompt, running, seq.adapters)
        host = self.host
        saved = host.lookup(self.state_key_for(seq.adapters), seq.prompt) if host is not None else None
        return max(shared, saved.n_tokens if saved is not None else 0)

    def _should_wait_for_prefix(self, seq: Sequence, available: int) -> bool:
        """True if a prompt being prefilled will soon hold a longer shared prefix than the `available`
        one (in the context or in host memory)."""
        if seq.prompt_logprobs:
            return False  # it computes every prompt position itself: no prefix to wait for
        for other in self.running:
            if other.status is not SeqStatus.PREFILL or other.adapters != seq.adapters:
                continue
            upcoming = common_prefix_len(seq.prompt, other.prompt)
            # choices of one request (`n`) always share their prompt, however short
            least = 1 if seq.group and seq.group == other.group else self.config.prefix_wait_min_tokens
            if upcoming - available >= least and other.n_computed < upcoming:
                return True
        return False

    # -- the step ------------------------------------------------------------------------------------
    def schedule(self, now_s: float) -> StepPlan:
        plan = StepPlan(kv_ops=self._pending_ops)
        self._pending_ops = []
        while self.waiting and self.can_admit():
            seq, passed = self._next_admission()
            if seq is None or not self.leaves_room(seq):
                break
            for other in passed:
                other.passed_over += 1
            self.waiting.remove(seq)
            plan.kv_ops.extend(self.admit(seq, now_s))
            plan.admitted.append(seq)
        self._compact(plan)
        plan.adapters = adapters = self._next_adapters()
        decoding = [s for s in self.running if s.status is SeqStatus.DECODE and s.adapters == adapters]
        budget = self.config.max_batch_tokens - len(decoding)
        width = StepWidth(len(decoding), len(decoding))
        for seq in decoding:
            if seq.drafted:
                room = self._draft_room(seq, budget)
                budget -= room
                plan.items.append(BatchItem(seq, [seq.output[-1]], seq.n_computed, True, draft_room=room))
                continue
            draft = self._draft(seq, budget, width)
            budget -= len(draft)
            plan.items.append(BatchItem(seq, [seq.output[-1], *draft], seq.n_computed, True, tuple(draft)))
        drafted = plan.num_tokens
        plan.items = even_drafts(plan.items)
        budget += drafted - plan.num_tokens  # guesses cut give their room back to the prompts
        prefilling = [s for s in self.running if s.status is SeqStatus.PREFILL and s.adapters == adapters]
        rows = self.prompt_rows
        for seq, n in prefill_shares(prefilling, budget, self.step_cost.fixed_tokens()):
            if seq.prompt_logprobs:  # every position's logits kept: within the step's rows for them
                n = min(n, rows)
                rows -= n
            if n > 0:
                plan.items.append(prefill_item(seq, n))
        return plan

    def _next_adapters(self) -> AdapterSet:
        """The adapter set this step runs: llama.cpp decodes one set per call, so a step carries the
        running sequences of one set, and the sets with running sequences take turns (in a fixed
        order, the one after the last served first), so none waits more than a step per other set."""
        self._last_adapters = chosen = next_turn({s.adapters for s in self.running}, self._last_adapters)
        return chosen

    def _compact(self, plan: StepPlan) -> None:
        """Move running sequences down into free ids below them (those admitting could not fill), so a
        step's streams run consecutively (see `PrefixCache.relocation`). A sequence with KV operations
        of its own pending this step stays where it is until they are done."""
        busy = {i for op in plan.kv_ops for i in kv_ids(op)}
        while (gap := self.cache.relocation(s.kv_seq for s in self.running)) is not None:
            src, dst = gap
            if src in busy:
                return
            seq = next(s for s in self.running if s.kv_seq == src)
            plan.kv_ops.extend(self.cache.relocate(src, dst, seq.n_computed))
            plan.moved.append((seq, src))
            seq.kv_seq = dst

    def _draft_room(self, seq: Sequence, budget: int) -> int:
        """How many guesses `seq` may verify this step, leaving room for the token verification adds."""
        return max(0, min(self.config.draft_tokens, seq.max_tokens - len(seq.output) - 1, budget))

    def _draft(self, seq: Sequence, budget: int, width: StepWidth) -> list[int]:
        """n-gram guesses for `seq`; with an adaptive length, only those its acceptance rate pays for in
        a step as wide as this one (`width`, which they widen)."""
        if seq.ngrams is None:
            return []
        room = self._draft_room(seq, budget)
        length = seq.draft_length
        if length is None:
            return seq.ngrams.propose(room)
        # a sequence with no drafts yet is judged by the others' recent acceptance
        rate = length.acceptance if length.acceptance is not None else self.draft_acceptance
        pays = rate is None or self.step_cost.pays(rate, width.tokens, width.produced)
        draft = seq.ngrams.propose(min(room, length.next_limit(pays)))
        width.tokens += len(draft)
        width.produced += len(draft) * (rate if rate is not None else PRIOR_ACCEPTANCE)
        return draft

    def expired(self, now_s: float) -> list[tuple[Sequence, str]]:
        """Sequences past a deadline, with which one: "queue" (still waiting) or "request"."""
        out = [(seq, "queue") for seq in self.waiting if now_s >= min(seq.queue_deadline_s, seq.deadline_s)]
        out += [(seq, "request") for seq in self.running if now_s >= seq.deadline_s]
        return out

    def restore_ops(self, ops: list[KvOp]) -> None:
        """KV operations a step took but did not perform: they run first next step."""
        self._pending_ops[:0] = ops

    def postprocess(self, plan: StepPlan, sampled: dict[str, list[int]], now_s: float) -> None:
        """Record what the decode computed and the tokens sampled (several when drafts were accepted)."""
        for item in plan.items:
            seq = item.seq
            if seq.status is SeqStatus.FINISHED:
                continue
            if not item.sample:
                seq.n_computed += len(item.tokens)
                if seq.prefilled_only:  # its prompt's end is its "first token": prompt time counted
                    seq.first_token_s = seq.last_token_s = now_s
                continue
            tokens = sampled[seq.request_id]
            accepted = len(tokens) - 1 if item.draft else 0  # the last one is the model's own next token
            if item.draft:
                seq.draft_n += len(item.draft)
                seq.draft_accepted += accepted
                seq.n_computed += 1 + accepted
                if accepted < len(item.draft):  # forget the rejected guesses' KV before the next decode
                    self._pending_ops.append(KvTrim(seq.kv_seq, seq.n_computed))
            else:
                seq.n_computed += len(item.tokens)
            if seq.draft_length is not None and seq.status is SeqStatus.DECODE:
                seq.draft_length.record(len(item.draft), accepted)
                if item.draft:
                    rate = accepted / len(item.draft)
                    self.draft_acceptance = blend(self.draft_acceptance, rate, ENGINE_ACCEPTANCE_WEIGHT)
            seq.output.extend(tokens)
            if seq.ngrams is not None:
                seq.ngrams.extend(tokens)
            if seq.status is SeqStatus.PREFILL:
                seq.status = SeqStatus.DECODE
                seq.first_token_s = now_s
            seq.last_token_s = now_s

    # -- leaving -------------------------------------------------------------------------------------
    def finish(self, seq: Sequence, reusable: bool = True) -> None:
        """Remove a running or waiting sequence; its slot keeps its KV for a later prompt (or is emptied)."""
        if seq.status is SeqStatus.FINISHED:
            return
        if seq.status is SeqStatus.WAITING:
            self.waiting.remove(seq)
        else:
            self.running.remove(seq)
            keep = reusable and self.config.prefix_caching
            released = self.cache.release(seq.kv_seq, seq.computed_tokens, keep, seq.adapters)
            self._pending_ops.extend(released)
        seq.status = SeqStatus.FINISHED

    # -- figures -------------------------------------------------------------------------------------
    @property
    def kv_tokens_used(self) -> int:
        """Upper bound of KV cells in use (shared prefixes counted once per holder)."""
        return sum(s.n_computed for s in self.running) + self.cache.held_tokens

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self._pending_ops)
