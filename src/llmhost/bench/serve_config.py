"""A sweep's ``serve:`` configuration: the model, copies, and any `llmhost serve` setting (but host and
port, which the sweep picks), each a value or a list. Its keys come from the settings spec."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, create_model

from llmhost.settings.serve import SERVE_SPEC, Setting, SettingsSpec


def as_list(v: Any) -> list[Any]:
    if v is None:
        return [None]
    return v if isinstance(v, list) else [v]


class _ServeBase(BaseModel):
    """A ``serve:`` configuration: the model, copies, and any `llmhost serve` setting (but host and port,
    which the sweep picks), each a value or a list; the configuration expands to their product. Its
    setting keys are generated from the settings spec (``serve_model``)."""

    model_config = ConfigDict(extra="forbid")
    settings: ClassVar[SettingsSpec] = SERVE_SPEC

    model: str | list[str] = "default"
    copies: int | list[int] = 1
    router_cpus: int = Field(default=0, ge=0)  # copies > 1: the endpoint file's router.num_cpus
    extra_args: list[str] = Field(default_factory=list)

    def given(self) -> dict[str, list[Any]]:
        """The settings this configuration sets, each as its list of values, in the spec's order. A
        repeatable setting's value is a list (`lora: [a=x.gguf, b=y.gguf]`); a list of them is swept."""
        out: dict[str, list[Any]] = {}
        for s in _sweepable(self.settings):
            v = getattr(self, s.name)
            if v is not None:
                one = s.repeatable and not any(isinstance(item, list) for item in v)
                out[s.name] = [v] if one else as_list(v)
        return out


def _sweepable(settings: SettingsSpec) -> list[Setting]:
    return [s for s in settings.built() if s.name not in ("host", "port")]


def serve_model(settings: SettingsSpec) -> type[_ServeBase]:
    """The ``serve:`` model: one optional key per setting, a value or a list of values."""
    keys: dict[str, Any] = {}
    for s in _sweepable(settings):
        kind: Any = str if s.type is Path else s.type
        if s.repeatable:  # the value is a list already: a list of lists sweeps it
            kind = list[kind]
        keys[s.name] = (kind | list[kind] | None, None)
    model = create_model("ServeSpec", __base__=_ServeBase, __module__=__name__, **keys)
    model.settings = settings
    return model


if TYPE_CHECKING:

    class ServeSpec(_ServeBase):
        def __init__(self, **values: Any) -> None: ...

else:
    ServeSpec = serve_model(SERVE_SPEC)


def label(setting: Setting, value: Any, varied: bool) -> str | None:
    """A setting's part of a configuration's name: always for those with a short label (t2, mc4, b512),
    else only when the configuration lists several values."""
    if setting.label:
        return f"{setting.label}{value}"
    return f"{setting.name}{value}" if varied else None


def endpoint_engine(settings: SettingsSpec, given: dict[str, Any]) -> dict[str, Any]:
    """The endpoint file's `engine:` for the given settings (threads are the copies' CPUs, LoRA adapters
    the component's `adapters:`, see `endpoint_adapters`)."""
    engine = {n: v for n, v in given.items() if n not in ("threads", "lora")}
    refused = [n for n in engine if not settings[n].endpoint]
    if refused:
        raise ValueError(f"{', '.join(refused)}: not a setting of an endpoint file, so not for copies > 1")
    return engine


def endpoint_adapters(given: dict[str, Any]) -> list[dict[str, Any]]:
    """The component's `adapters:` for the given `lora` values (`--lora NAME=PATH[:SCALE]`, read as
    `llmhost serve` reads them)."""
    from llmhost.engine.lora import parse_lora

    out: list[dict[str, Any]] = []
    for text in given.get("lora") or []:
        name, path, scale = parse_lora(text)
        out.append({"name": name, "path": path, "scale": scale})
    return out
