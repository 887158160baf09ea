"""The Files and Batches calls `llmhost batch` makes, over HTTP."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import httpx

from llmhost.errors import LlmhostError

# terminal statuses: the batch will not change again
ENDED = ("completed", "failed", "expired", "cancelled")
# how long a busy server (429, 503: a copy starting, the jobs folder still held by a server draining)
# is asked again before the run gives up
BUSY_WAIT_S = 120.0


class BatchApiError(LlmhostError, RuntimeError):
    """The server refused a call: the message is its error body's, the status its answer's."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class BatchClient:
    def __init__(self, url: str, api_key: str = "") -> None:
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=120)

    def close(self) -> None:
        self.http.close()

    def _send(self, method: str, path: str, upload: Path | None = None, **kw: Any) -> httpx.Response:
        """The server's answer; a busy one is asked again after its Retry-After, for BUSY_WAIT_S.
        `upload`: a file sent as a multipart form's `file` (read from disk as it is sent, each try)."""
        deadline = time.monotonic() + BUSY_WAIT_S
        while True:
            with contextlib.ExitStack() as stack:
                if upload is not None:
                    kw["files"] = {"file": (upload.name, stack.enter_context(upload.open("rb")))}
                response = self.http.request(method, path, **kw)
            if response.status_code not in (429, 503) or time.monotonic() > deadline:
                return response
            time.sleep(float(response.headers.get("retry-after", "1") or 1))

    def _checked(self, response: httpx.Response) -> Any:
        if response.status_code >= 400:
            try:
                message = response.json()["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = response.text
            where = f"{response.request.method} {response.request.url.path}"
            raise BatchApiError(f"{where}: {response.status_code} {message}", response.status_code)
        return response.json()

    def upload(self, path: Path) -> str:
        """The id of `path` uploaded for a batch (streamed from disk)."""
        with path.open("rb") as f:
            body = self._checked(
                self.http.post("/v1/files", files={"file": (path.name, f)}, data={"purpose": "batch"})
            )
        return str(body["id"])

    def create(self, file_id: str, endpoint: str) -> str:
        body = {"input_file_id": file_id, "endpoint": endpoint, "completion_window": "24h"}
        return str(self._checked(self._send("POST", "/v1/batches", json=body))["id"])

    def get(self, batch_id: str) -> dict[str, Any] | None:
        """The batch, or None where the server does not know it."""
        response = self._send("GET", f"/v1/batches/{batch_id}")
        if response.status_code == 404:
            return None
        found: dict[str, Any] = self._checked(response)
        return found

    def download(self, file_id: str, out: Path) -> None:
        with self.http.stream("GET", f"/v1/files/{file_id}/content") as response:
            if response.status_code >= 400:
                response.read()
                self._checked(response)
            with out.open("wb") as f:
                for chunk in response.iter_bytes():
                    f.write(chunk)
