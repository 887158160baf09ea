"""SageMaker async invocations as the route queues them: each kept in the jobs directory with where
its answer and its error will be written, and the runner woken."""

from __future__ import annotations

from collections.abc import Callable

from llmhost.jobs.async_store import AsyncInvocation
from llmhost.jobs.async_wire import AskError, AsyncAsk, failure_location, output_location
from llmhost.jobs.settings import JobsSettings
from llmhost.jobs.store import JobStore


class AsyncInvocations:
    def __init__(
        self, store: Callable[[], JobStore], settings: JobsSettings, wake: Callable[[], None]
    ) -> None:
        self._store = store
        self.settings = settings
        self._wake = wake

    def submit(self, ask: AsyncAsk) -> AsyncInvocation:
        """Queued durably (the 202 is answered once it is committed)."""
        output, failure = self.settings.output_prefix, self.settings.failure_prefix
        if output is None or failure is None:
            raise AskError(
                "this server has no async output configured: start it with --async-output "
                "s3://bucket/prefix/ (and --async-failure for the errors) to take InvokeEndpointAsync"
            )
        invocation = self._store().invocations.add(
            ask, output_location(output, ask.inference_id), failure_location(failure, ask.inference_id)
        )
        self._wake()
        return invocation
