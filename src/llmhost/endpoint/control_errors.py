"""What the endpoint's control plane refuses, each error with the HTTP status the admin API answers it with
(`status`, llmhost.errors)."""

from __future__ import annotations

from llmhost.errors import ConflictError, LlmhostError, NotFoundError, UnavailableError


class ComponentError(LlmhostError, LookupError):
    """Unknown component, or a name already taken."""


class UnknownComponentError(NotFoundError, ComponentError):
    """No component has that name (HTTP 404)."""


class ComponentExistsError(ConflictError, ComponentError):
    """A component of that name is already there (HTTP 409)."""


class ComponentLoadError(UnavailableError, RuntimeError):
    """An on-demand model could not be loaded (no room in time, or its copy failed to start)."""


class ModelRefError(NotFoundError, ComponentError):
    """A component's model reference names nothing usable (missing file, S3 failure, cache not
    writable), or one of its adapters does not fit it; the message says which component and why, `field`
    which of its fields (`model`, `adapters[0].path`)."""

    def __init__(self, component: str, message: str, field: str = "model") -> None:
        super().__init__(message)
        self.component = component
        self.field = field


class ComponentInUseError(ConflictError, RuntimeError):
    """The component cannot go as things stand: adapter components live on it (HTTP 409)."""


class CopyRefusal(LlmhostError, RuntimeError):
    """A copy refused an adapter's load or unload: its status, message and field, relayed; or the
    endpoint refused the adapter before any copy saw it, as a copy would (`adapter_check`)."""

    def __init__(self, status: int, message: str, field: str | None, retry_after: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.field = field
        self.retry_after = retry_after
