"""OpenAI's /v1/files and /v1/batches routes, served by `llmhost serve` and the endpoint router alike
(the app keeps its Jobs at `app.state.jobs`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request
from starlette.datastructures import UploadFile
from starlette.responses import FileResponse, JSONResponse, Response

from llmhost.jobs.files import CHUNK, UPLOAD_PATH
from llmhost.jobs.protocol import Batch, BatchCreate, FileDeleted, FileObject, FileUpload, Page
from llmhost.jobs.service import Jobs
from llmhost.server.routes.deps import json_body
from llmhost.web.apidoc import BODY, COMMON, merge, operation
from llmhost.web.apidoc import errors as declared
from llmhost.web.errors import APIError

router = APIRouter()
MULTIPART = "multipart/form-data"
READ = merge(COMMON, declared(404))
# a list's query (`limit` out of range, an unknown `order`) is validated: a 422 naming it
LIST = merge(READ, declared(422))
UPLOAD = (
    "A multipart form: `file` (JSON Lines, one request per line) and `purpose` (`batch`); "
    "`expires_after[anchor]` (`created_at`) and `expires_after[seconds]` (3600 to 2592000, default "
    "30 days). The file is streamed to the jobs directory (--jobs-dir); over --jobs-max-file-mb it is a 413."
)


def jobs(request: Request) -> Jobs:
    found: Jobs = request.app.state.jobs
    return found


def _json(model: FileObject | FileDeleted | Batch | Page[FileObject] | Page[Batch]) -> JSONResponse:
    return JSONResponse(model.model_dump(mode="json"))


@router.post(
    UPLOAD_PATH,
    openapi_extra=operation(
        "OpenAI: upload a file for a batch",
        body=[FileUpload],
        body_media=[MULTIPART],
        json_body=False,
        success=FileObject,
        errors=BODY,
        description=UPLOAD,
    ),
)
async def create_file(request: Request) -> Response:
    if not request.headers.get("content-type", "").startswith(MULTIPART):
        raise APIError(400, f"a file is uploaded as {MULTIPART}", field="file")
    form = await request.form(max_files=1, max_fields=8)
    try:
        upload, purpose = form.get("file"), form.get("purpose")
        if not isinstance(upload, UploadFile):
            raise APIError(400, "missing required parameter: 'file'", field="file")
        if not isinstance(purpose, str):
            raise APIError(400, "missing required parameter: 'purpose'", field="purpose")
        seconds = _expires_after(form.get("expires_after[anchor]"), form.get("expires_after[seconds]"))

        async def chunks() -> AsyncIterator[bytes]:
            while chunk := await upload.read(CHUNK):
                yield chunk

        meta = await jobs(request).files.upload(upload.filename or "upload.jsonl", purpose, chunks(), seconds)
    finally:
        await form.close()
    return _json(meta)


def _expires_after(anchor: object, seconds: object) -> int | None:
    if anchor is None and seconds is None:
        return None
    if anchor != "created_at":
        raise APIError(400, "expires_after[anchor] must be 'created_at'", field="expires_after[anchor]")
    if not isinstance(seconds, str) or not seconds.isdigit():
        raise APIError(
            400, "expires_after[seconds] must be a whole number of seconds", field="expires_after[seconds]"
        )
    return int(seconds)


@router.get("/v1/files", openapi_extra=operation("OpenAI: list files", success=Page[FileObject], errors=LIST))
async def list_files(
    request: Request,
    purpose: str | None = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 10_000,
    order: Literal["asc", "desc"] = "desc",
    after: str | None = None,
) -> Response:
    return _json(jobs(request).files.list(purpose, limit, order, after))


@router.get("/v1/files/{file_id}", openapi_extra=operation("OpenAI: a file", success=FileObject, errors=READ))
async def get_file(request: Request, file_id: str) -> Response:
    return _json(jobs(request).files.get(file_id))


@router.get(
    "/v1/files/{file_id}/content",
    openapi_extra=operation("OpenAI: a file's content", media={"application/jsonl": "The file"}, errors=READ),
)
async def file_content(request: Request, file_id: str) -> Response:
    return FileResponse(jobs(request).files.path(file_id), media_type="application/jsonl")


@router.delete(
    "/v1/files/{file_id}",
    openapi_extra=operation("OpenAI: delete a file", success=FileDeleted, errors=merge(READ, declared(409))),
)
async def delete_file(request: Request, file_id: str) -> Response:
    return _json(jobs(request).files.delete(file_id))


@router.post(
    "/v1/batches",
    openapi_extra=operation(
        "OpenAI: create a batch",
        body=[BatchCreate],
        success=Batch,
        errors=merge(BODY, declared(404)),
        description="Runs every line of the input file through `endpoint`, behind interactive requests.",
    ),
)
async def create_batch(request: Request) -> Response:
    ask = BatchCreate.model_validate(await json_body(request))
    return _json(jobs(request).batches.create(ask))


@router.get("/v1/batches", openapi_extra=operation("OpenAI: list batches", success=Page[Batch], errors=LIST))
async def list_batches(
    request: Request, limit: Annotated[int, Query(ge=1, le=100)] = 20, after: str | None = None
) -> Response:
    return _json(jobs(request).batches.list(limit, after))


@router.get("/v1/batches/{batch_id}", openapi_extra=operation("OpenAI: a batch", success=Batch, errors=READ))
async def get_batch(request: Request, batch_id: str) -> Response:
    return _json(jobs(request).batches.get(batch_id))


@router.post(
    "/v1/batches/{batch_id}/cancel",
    openapi_extra=operation("OpenAI: cancel a batch", success=Batch, errors=merge(READ, declared(409))),
)
async def cancel_batch(request: Request, batch_id: str) -> Response:
    return _json(jobs(request).batches.cancel(batch_id))
