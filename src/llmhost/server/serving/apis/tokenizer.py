"""The tokenizer endpoints: /tokenize and /detokenize in llama-server's and vLLM's shapes, and vLLM's
/tokenizer_info (what lm-eval's `tokenizer_backend=remote` reads instead of downloading a tokenizer)."""

from __future__ import annotations

import asyncio

from llmhost.server.protocol.llama import DetokenizeRequest, TokenizeRequest
from llmhost.server.protocol.outputs import Detokenized, TokenizerInfo, TokenPiece, Tokens, VLLMTokens
from llmhost.server.serving.context import ServingContext
from llmhost.web.errors import APIError


async def tokenize(ctx: ServingContext, body: TokenizeRequest) -> Tokens | VLLMTokens:
    if (body.content is None) == (body.prompt is None):
        raise APIError(
            422,
            "give the text in `content` (llama-server's /tokenize) or in `prompt` "
            "(vLLM's): exactly one of them",
            field="prompt",
        )
    if body.content is not None:
        tokens = await asyncio.to_thread(ctx.tokenize, body.content, body.add_special)
        if body.with_pieces:
            return Tokens(tokens=[TokenPiece(id=t, piece=ctx.model.token_text(t)) for t in tokens])
        return Tokens(tokens=tokens)
    assert body.prompt is not None
    tokens = await asyncio.to_thread(ctx.tokenize, body.prompt, body.add_special_tokens)
    return VLLMTokens(
        count=len(tokens),
        max_model_len=ctx.settings.engine.max_total_tokens,
        tokens=tokens,
        token_strs=[ctx.model.token_text(t) for t in tokens] if body.return_token_strs else None,
    )


async def detokenize(ctx: ServingContext, body: DetokenizeRequest) -> Detokenized:
    """The text under both names: llama-server's `content` and vLLM's `prompt`."""
    tokens = ctx.check_tokens(body.tokens, "tokens")
    text = await asyncio.to_thread(ctx.model.detokenize, tokens)
    return Detokenized(content=text, prompt=text)


def tokenizer_info(ctx: ServingContext) -> TokenizerInfo:
    """vLLM's GET /tokenizer_info: the special tokens and the chat template. Text is tokenized with
    special tokens parsed (`<bos>` in text is the BOS token); `add_bos_token` says whether tokenizing
    with special tokens (a string prompt) starts with BOS. Token-id prompts are used as given."""
    ctx.require_model()
    info = ctx.model.info
    return TokenizerInfo(
        tokenizer_class="llama.cpp",
        model=ctx.settings.model_name,
        bos_token=info.bos_token,
        eos_token=info.eos_token,
        pad_token=info.pad_token,
        add_bos_token=info.add_bos,
        chat_template=ctx.settings.chat_template or info.chat_template,
        model_max_length=ctx.settings.engine.max_total_tokens,
        vocab_size=info.n_vocab,
    )
