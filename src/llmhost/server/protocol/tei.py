"""TEI's (text-embeddings-inference's) POST /embed request and answer."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, RootModel, StrictBool, StrictStr

from llmhost.server.protocol.openai import Strict


class EmbedRequest(Strict):
    inputs: StrictStr | list[StrictStr]
    normalize: StrictBool = True  # unit L2 norm
    # an input over the server's --max-input-tokens: cut to it (true), else refused (false)
    truncate: StrictBool = False
    truncation_direction: Literal["Right", "Left"] = "Right"  # Right: the end is cut; Left: the start
    # TEI: a prompt of the model's sentence-transformers config prepended; a GGUF carries none
    prompt_name: StrictStr | None = None
    dimensions: Annotated[int, Field(ge=1)] | None = None  # the vectors' first components only

    def texts(self) -> list[str]:
        return [self.inputs] if isinstance(self.inputs, str) else list(self.inputs)


class EmbedResponse(RootModel[list[list[float]]]):
    """One vector per input, in order."""
