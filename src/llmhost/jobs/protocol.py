"""OpenAI's Files and Batches objects, as the openai client reads them."""

from __future__ import annotations

from typing import Annotated, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from llmhost.jobs.status import BatchStatus

# the routes a batch's lines may call (OpenAI's, those llmhost serves)
BATCH_ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses")
BatchEndpoint = Literal["/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses"]
# OpenAI's only window, and how long it is
COMPLETION_WINDOWS = {"24h": 24 * 3600}
# OpenAI's bounds on a file's `expires_after.seconds` (an hour to 30 days), and a batch file's default
FILE_EXPIRY_BOUNDS_S = (3600, 30 * 24 * 3600)
BATCH_FILE_EXPIRY_S = 30 * 24 * 3600


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FileUpload(BaseModel):
    """POST /v1/files's multipart form (for the document: the route reads the form as it streams)."""

    file: bytes
    purpose: Literal["batch"]
    expires_after_anchor: Literal["created_at"] | None = Field(None, alias="expires_after[anchor]")
    expires_after_seconds: int | None = Field(
        None, ge=FILE_EXPIRY_BOUNDS_S[0], le=FILE_EXPIRY_BOUNDS_S[1], alias="expires_after[seconds]"
    )


class FileObject(BaseModel):
    id: str
    object: Literal["file"] = "file"
    bytes: int
    created_at: int
    filename: str
    purpose: Literal["batch", "batch_output"]
    status: Literal["uploaded", "processed", "error"] = "processed"
    expires_at: int | None = None
    status_details: str | None = None


class FileDeleted(BaseModel):
    id: str
    object: Literal["file"] = "file"
    deleted: bool = True


class BatchCreate(Strict):
    input_file_id: str
    endpoint: BatchEndpoint
    completion_window: Literal["24h"]
    metadata: Annotated[dict[str, Annotated[str, Field(max_length=512)]], Field(max_length=16)] | None = None


class BatchError(BaseModel):
    code: str
    message: str
    param: str | None = None
    line: int | None = None


class BatchErrors(BaseModel):
    object: Literal["list"] = "list"
    data: list[BatchError]


class RequestCounts(BaseModel):
    total: int = 0
    completed: int = 0
    failed: int = 0


class InputTokensDetails(BaseModel):
    cached_tokens: int = 0


class OutputTokensDetails(BaseModel):
    reasoning_tokens: int = 0


class BatchUsage(BaseModel):
    input_tokens: int = 0
    input_tokens_details: InputTokensDetails = Field(default_factory=InputTokensDetails)
    output_tokens: int = 0
    output_tokens_details: OutputTokensDetails = Field(default_factory=OutputTokensDetails)
    total_tokens: int = 0


class Batch(BaseModel):
    id: str
    object: Literal["batch"] = "batch"
    endpoint: str
    errors: BatchErrors | None = None
    input_file_id: str
    completion_window: str
    status: BatchStatus
    output_file_id: str | None = None
    error_file_id: str | None = None
    created_at: int
    in_progress_at: int | None = None
    expires_at: int | None = None
    finalizing_at: int | None = None
    completed_at: int | None = None
    failed_at: int | None = None
    expired_at: int | None = None
    cancelling_at: int | None = None
    cancelled_at: int | None = None
    request_counts: RequestCounts = Field(default_factory=RequestCounts)
    usage: BatchUsage = Field(default_factory=BatchUsage)
    metadata: dict[str, str] | None = None


T = TypeVar("T", bound=BaseModel)


class Page(BaseModel, Generic[T]):
    """A cursor page (`after` the last id of the previous page), as the openai client pages lists."""

    object: Literal["list"] = "list"
    data: list[T]
    first_id: str | None = None
    last_id: str | None = None
    has_more: bool = False
