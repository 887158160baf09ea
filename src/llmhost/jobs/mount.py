"""Jobs given to an app (a server, the endpoint router, the Ray ingress): one way for all three."""

from __future__ import annotations

from fastapi import FastAPI

from llmhost.jobs import async_routes, routes
from llmhost.jobs.service import Jobs
from llmhost.jobs.settings import JobsSettings


def mount(app: FastAPI, settings: JobsSettings, scripted: bool = False) -> Jobs:
    """The app's jobs, kept at `app.state.jobs`, with their routes (added now: before a catch-all the
    app adds later). Its lifespan starts and stops them, and its key check accepts `jobs.token`, the
    key of the requests they send through the app; `scripted`: as `Jobs` takes it."""
    jobs = Jobs(settings, app, scripted=scripted)
    app.state.jobs = jobs
    app.include_router(routes.router)
    app.include_router(async_routes.router)
    return jobs
