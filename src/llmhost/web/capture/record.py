"""One captured event as SageMaker writes it: a JSON line of `captureData` (`endpointInput`,
`endpointOutput`), `eventMetadata` and `eventVersion`, under ENDPOINT/VARIANT/yyyy/mm/dd/hh/ in files
named MM-SS-mmm-UUID.jsonl (the minute, second and millisecond the file was begun)."""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from llmhost.shared.jsontext import compact

# SageMaker's CaptureContentTypeHeader defaults: these are written as text, anything else in base64
JSON_TYPES = ("application/json",)
CSV_TYPES = ("text/csv",)
EVENT_VERSION = "0"


@dataclass(frozen=True, slots=True)
class Payload:
    """A body as it crossed the wire: its Content-Type ("" when it had none) and its bytes, in the
    pieces they came in (joined by the writer, off the request's path)."""

    content_type: str
    chunks: tuple[bytes, ...]

    @property
    def size(self) -> int:
        return sum(len(c) for c in self.chunks)


@dataclass(frozen=True, slots=True)
class Event:
    """One captured request: when it arrived (epoch seconds), SageMaker's InferenceId if the client gave
    one, its body and its answer (None: not captured, per the capture mode)."""

    time: float
    input: Payload | None
    output: Payload | None
    inference_id: str = ""

    @property
    def size(self) -> int:
        return sum(p.size for p in (self.input, self.output) if p is not None)


def encoding_of(content_type: str) -> str:
    """SageMaker's encoding for a body of this type: JSON, CSV, else BASE64."""
    media = content_type.split(";", 1)[0].strip().lower()
    if media in JSON_TYPES or media.endswith("+json"):
        return "JSON"
    if media in CSV_TYPES:
        return "CSV"
    return "BASE64"


def payload_field(mode: str, payload: Payload) -> dict[str, str]:
    """`endpointInput` / `endpointOutput`: text for JSON and CSV bodies in UTF-8, else base64."""
    body = b"".join(payload.chunks)
    encoding = encoding_of(payload.content_type)
    data = ""
    if encoding != "BASE64":
        try:
            data = body.decode("utf-8")
        except UnicodeDecodeError:
            encoding = "BASE64"
    if encoding == "BASE64":
        data = base64.b64encode(body).decode("ascii")
    return {"observedContentType": payload.content_type, "mode": mode, "data": data, "encoding": encoding}


def iso_time(epoch: float) -> str:
    """ISO 8601 in UTC to the millisecond, as SageMaker's inferenceTime: 2024-05-01T13:36:30.123Z."""
    moment = datetime.fromtimestamp(epoch, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def line(event: Event, event_id: str | None = None) -> bytes:
    """The event's JSON line, newline included."""
    capture: dict[str, dict[str, str]] = {}
    if event.input is not None:
        capture["endpointInput"] = payload_field("INPUT", event.input)
    if event.output is not None:
        capture["endpointOutput"] = payload_field("OUTPUT", event.output)
    metadata = {"eventId": event_id or str(uuid.uuid4()), "inferenceTime": iso_time(event.time)}
    if event.inference_id:
        metadata["inferenceId"] = event.inference_id
    record = {"captureData": capture, "eventMetadata": metadata, "eventVersion": EVENT_VERSION}
    return compact(record).encode() + b"\n"


def hour_folder(endpoint: str, variant: str, epoch: float) -> str:
    """ENDPOINT/VARIANT/yyyy/mm/dd/hh: the folder of the lines captured in that hour (UTC)."""
    return f"{endpoint}/{variant}/" + datetime.fromtimestamp(epoch, UTC).strftime("%Y/%m/%d/%H")


def file_name(epoch: float) -> str:
    """MM-SS-mmm-UUID.jsonl: a new file's name, begun at `epoch` (unique across copies and restarts)."""
    moment = datetime.fromtimestamp(epoch, UTC)
    return moment.strftime("%M-%S-") + f"{moment.microsecond // 1000:03d}-{uuid.uuid4()}.jsonl"
