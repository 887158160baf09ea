"""Production and shadow variants on a real endpoint (the tiny model of `tiny_model`, this host's 2 CPUs):
component `chat` has variants `a` (weight 3) and `b` (weight 1), one copy each, and a shadow `s` (100% of the
requests copied to its one copy). The tests share that endpoint and run in order."""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from llmhost.endpoint.control.variants import INVOKED_HEADER, TARGET_HEADER
from llmhost.endpoint.dataplane.router import COPY_HEADER
from tests.integration.console_helpers import WAIT_MS, Watched, chromium, needs_chromium
from tests.integration.endpoint_helpers import ENGINE, Endpoint, start_endpoint, stop_endpoint


def endpoint_file(model: Path) -> str:
    return f"""
name: variants
components:
  - name: chat
    model: {model}
    resources: {{num_cpus: 0.5, memory_mb: 600}}
    # every prompt computed afresh: a copy's cached prefixes make near-tied tokens go either way, and the
    # copies' answers are compared word for word
    engine: {ENGINE[:-1]}, prefix_caching: false}}
    startup_health_check_timeout_s: 90
    variants:
      - {{name: a, weight: 3}}
      - {{name: b, weight: 1}}
      - {{name: s, shadow: 100}}
"""


@pytest.fixture(scope="module")
def ep(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Iterator[Endpoint]:
    endpoint = start_endpoint(tmp_path_factory.mktemp("variants"), endpoint_file(tiny_model))
    endpoint.wait_for(
        "every copy ready",
        lambda: all(
            c["ready"] == c["copies"] == 1 for c in endpoint.status()["components"] if "variant_of" in c
        ),
        timeout=180,
    )
    yield endpoint
    stop_endpoint(endpoint)


def variants(ep: Endpoint) -> dict[str, dict[str, Any]]:
    [chat] = [c for c in ep.status()["components"] if c["name"] == "chat"]
    return {v["name"]: v for v in chat["variants"]}


def body(i: int = 0, tokens: int = 1, stream: bool = False) -> dict[str, Any]:
    return {"model": "chat", "prompt": f"Item {i}:", "max_tokens": tokens, "temperature": 0, "stream": stream}


async def invoked(ep: Endpoint, n: int, headers: dict[str, str] | None = None) -> Counter[str]:
    """`n` requests, 8 at a time: the variants their answers name."""
    limit = asyncio.Semaphore(8)
    async with httpx.AsyncClient(base_url=ep.url, timeout=120) as client:

        async def one(i: int) -> str:
            async with limit:
                r = await client.post("/v1/completions", json=body(i), headers=headers)
            assert r.status_code == 200, r.text
            assert r.headers[COPY_HEADER].startswith(f"chat:{r.headers[INVOKED_HEADER]}-")
            return r.headers[INVOKED_HEADER]

        return Counter(await asyncio.gather(*(one(i) for i in range(n))))


def settled(ep: Endpoint) -> bool:
    """The shadow answered (and compared) every copy it was sent."""
    return bool(variants(ep)["s"]["shadow"]["in_flight"] == 0)


def test_requests_split_by_weight(ep: Endpoint) -> None:
    before = variants(ep)["s"]["shadow"]
    counts = asyncio.run(invoked(ep, 200))
    assert set(counts) <= {"a", "b"}  # the shadow answers none
    assert 125 <= counts["a"] <= 175 and counts["a"] + counts["b"] == 200, counts
    ep.wait_for("the shadow settled", lambda: settled(ep))
    state = variants(ep)
    assert (state["a"]["routed"], state["b"]["routed"]) == (counts["a"], counts["b"])
    assert (state["a"]["share"], state["b"]["share"]) == (0.75, 0.25)
    s = state["s"]["shadow"]
    # every request was copied, or dropped (counted) while the shadow's sequences were all busy
    assert s["sent"] + s["dropped"] - before["sent"] - before["dropped"] == 200


def test_the_target_variant_header_pins_one(ep: Endpoint) -> None:
    assert asyncio.run(invoked(ep, 12, {TARGET_HEADER: "b"})) == Counter(b=12)
    r = httpx.post(f"{ep.url}/v1/completions", json=body(), headers={TARGET_HEADER: "nope"}, timeout=30)
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["param"] == TARGET_HEADER
    assert error["message"] == (
        f"{TARGET_HEADER}: component 'chat' has no production variant 'nope'; its production variants: a, b"
    )
    # SageMaker's runtime: InvokeEndpoint's TargetVariant, and its ValidationError for an unknown one
    runtime = boto3.client(
        "sagemaker-runtime",
        endpoint_url=ep.url,
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
        config=Config(retries={"max_attempts": 1}),
    )
    payload = json.dumps({"inputs": "Hello", "parameters": {"max_new_tokens": 1}})
    answer = runtime.invoke_endpoint(
        EndpointName="variants", Body=payload, ContentType="application/json", TargetVariant="a"
    )
    assert answer["InvokedProductionVariant"] == "a"
    with pytest.raises(ClientError) as info:
        runtime.invoke_endpoint(
            EndpointName="variants", Body=payload, ContentType="application/json", TargetVariant="s"
        )
    assert info.value.response["Error"]["Code"] == "ValidationError"
    assert "'s' (a shadow variant" in info.value.response["Error"]["Message"]


def test_weights_changed_at_run_time_take_effect(ep: Endpoint) -> None:
    done = ep.cli("weights", "chat", "a=0", "b=2")
    assert done.returncode == 0, done.stderr
    assert "a 0 (0.0%), b 2 (100.0%)" in done.stdout
    assert asyncio.run(invoked(ep, 16)) == Counter(b=16)
    refused = ep.cli("weights", "chat", "b=0")
    assert refused.returncode == 1 and "would all be 0" in refused.stderr
    unknown = ep.cli("weights", "chat", "c=1")
    assert unknown.returncode == 1 and "has no variant 'c'; its variants: a, b, s" in unknown.stderr
    for given, status, param, said in (
        ({"component": "chat", "weights": {"a": "1"}}, 422, "weights.a", "Input should be a valid number"),
        ({"component": "chat:a", "weights": {"a": 1}}, 422, "component", "is a variant of 'chat'"),
        ({"component": "nope", "weights": {"a": 1}}, 404, None, "unknown inference component 'nope'"),
    ):
        r = httpx.post(f"{ep.url}/admin/weights", json=given, timeout=10)
        assert r.status_code == status and r.json()["error"]["param"] == param, r.text
        assert said in r.json()["error"]["message"]
    # the variants have the copies: they scale, the component does not; a variant goes with it
    r = httpx.post(f"{ep.url}/admin/scale", json={"component": "chat", "copies": 2}, timeout=10)
    assert r.status_code == 422 and "scale one of chat:a, chat:b, chat:s" in r.text
    r = httpx.delete(f"{ep.url}/admin/components/chat:b", timeout=10)
    assert r.status_code == 422 and "'chat:b' is a variant of component 'chat'" in r.text
    lora = {"component": "chat", "name": "x", "path": "x.gguf"}
    r = httpx.post(f"{ep.url}/admin/adapters/load", json=lora, timeout=10)
    assert r.status_code == 422 and "has variants, whose copies load no LoRA adapters" in r.text
    done = ep.cli("weights", "chat", "a=1", "b=0")
    assert done.returncode == 0, done.stderr
    assert asyncio.run(invoked(ep, 16)) == Counter(a=16)
    assert ep.cli("weights", "chat", "a=3", "b=1").returncode == 0


def one_by_one(ep: Endpoint, bodies: list[dict[str, Any]]) -> list[str]:
    """Each request once the shadow answered the one before: every copy then computes one sequence
    at a time (a batch of several rounds differently, and near-tied tokens may go either way)."""
    out = []
    for b in bodies:
        r = httpx.post(f"{ep.url}/v1/completions", json=b, timeout=120)
        assert r.status_code == 200, r.text
        assert r.headers[INVOKED_HEADER] in ("a", "b")
        out.append(r.text)
        ep.wait_for("the shadow settled", lambda: settled(ep))
    return out


def test_a_shadow_sees_every_request_answers_none_and_reports_its_agreement(ep: Endpoint) -> None:
    ep.wait_for("the shadow settled", lambda: settled(ep))
    before = variants(ep)["s"]["shadow"]
    bodies = [body(i, tokens=6) for i in range(10)] + [body(i, tokens=6, stream=True) for i in range(2)]
    answers = one_by_one(ep, bodies)
    # a variant's copies answer under their component's name
    assert all('"model":"chat"' in a.replace(" ", "") for a in answers)
    ep.wait_for("the shadow settled", lambda: settled(ep))
    s = variants(ep)["s"]["shadow"]
    sent, compared, matched = (s[k] - before[k] for k in ("sent", "compared", "matched"))
    assert (sent, s["dropped"] - before["dropped"], s["failed"]) == (12, 0, 0)
    # the same model at temperature 0: the shadow says what the primary said, streams (accumulated) too
    assert (compared, matched) == (12, 12)
    assert s["agreement"] is not None and s["mean_latency_s"] > 0
    status = ep.cli("status")
    assert status.returncode == 0, status.stderr
    assert "shadow 100%" in status.stdout and "75.0%" in status.stdout
    metrics = httpx.get(f"{ep.url}/metrics", timeout=30).text
    assert 'llmhost_endpoint_variant_weight{component="chat",variant="a"} 3.0' in metrics
    assert (
        f'llmhost_endpoint_shadow_compared_total{{component="chat",variant="s"}} {s["compared"]}.0' in metrics
    )
    overview = httpx.get(f"{ep.url}/console/api/overview", timeout=30).json()
    [chat] = [c for c in overview["components"] if c["name"] == "chat"]
    assert [(v["name"], v["weight"]) for v in chat["variants"]] == [("a", 3.0), ("b", 1.0), ("s", None)]


@needs_chromium
def test_the_console_shows_the_variants_with_their_weights(ep: Endpoint) -> None:
    for browser in chromium():
        w = Watched(browser, None)
        w.page.goto(f"{ep.url}/console")
        w.page.wait_for_selector('div.comp[data-component="chat"] p.variants', timeout=WAIT_MS)
        shown = w.page.inner_text('div.comp[data-component="chat"] p.variants')
        assert "a: weight 3 (75%)" in shown and "b: weight 1 (25%)" in shown, shown
        assert "s: shadow 100%" in shown and re.search(r"agreement [\d.]+% of [1-9]", shown), shown
        # a variant's copies are a component of their own, with its scale input and no remove button
        variant = 'div.comp[data-component="chat:a"]'
        assert "a variant of chat" in w.page.inner_text(f"{variant} .comp-head")
        assert w.page.locator(f"{variant} input.scale-input").count() == 1
        assert w.page.locator(f"{variant} .remove-btn").count() == 0
        assert w.page.locator('div.comp[data-component="chat"] input.scale-input').count() == 0
        w.check_clean()
        w.close()
