"""`/api/create`'s Modelfile fields, checked and turned into the new model's
`ModelDefaults` (`core/modelfiles`) before anything is registered. Pure but for the files an
ADAPTER names (`adapter_file`, `check_fits`).

- `modelfile` (older clients send the Modelfile itself) is parsed (`modelfile`) into the
  fields Ollama's CLI sends; `FROM`/`ADAPTER @sha256:<hex>` name uploaded blobs;
- `parameters`: Ollama's names and types; each must be one Juggler honours (the sampling
  ones within the ranges the OpenAI body allows; the load ones pass the load's checks in
  `create`), else a 400 naming `parameters.NAME`;
- `template` is parsed and rendered once (`prompt_template.check`);
- `messages`: system, user or assistant messages with text;
- a model made `from` a created one inherits its defaults; given fields replace them
  (parameters name by name).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from juggler.api.openai import SamplingBody
from juggler.errors import BadRequest, CheckpointMissing, NotImplementedParam
from juggler.registry.adapters import check_adapter
from juggler.registry.checkpoint import resolve_checkpoint
from juggler.router.core.modelfiles import LOAD_PARAMS, ModelDefaults
from juggler.router.core.prompt_template import check as check_template
from juggler.router.ollama import modelfile as mf
from juggler.router.ollama import options as oo
from juggler.router.ollama.wire import API_VERSION, CreateBody
from juggler.types import ModelInfo

_ROLES = ("system", "user", "assistant")
#: OpenAI field -> the Ollama parameter it comes from (for the 400's name).
_OLLAMA_NAME = {"max_tokens": "num_predict"}


def legacy_fields(body: CreateBody) -> tuple[CreateBody, list[str]]:
    """The body with its `modelfile` read into the fields (both given: 400), and the
    ADAPTER paths that Modelfile names."""
    if body.modelfile is None:
        return body, []
    for name in ("from_", "files", "adapters", "template", "system", "parameters", "messages"):
        if getattr(body, name) not in (None, {}, []):
            raise BadRequest(f"give modelfile or {name.rstrip('_')}, not both", param="modelfile")
    fields = mf.create_fields(body.modelfile)
    source = str(fields.pop("from"))
    update: dict[str, Any] = {k: v for k, v in fields.items() if k != "adapters"}
    if source.startswith("@"):
        update["files"] = {"model.gguf": source[1:]}
    else:
        update["from_"] = source
    return body.model_copy(update={**update, "modelfile": None}), fields.get("adapters", [])


def check_requires(version: str | None) -> None:
    """REQUIRES: the Ollama version the model needs; past the one Juggler speaks, a 400."""
    if not version:
        return
    try:
        wanted = tuple(int(p) for p in version.lstrip("v").split("."))
    except ValueError:
        raise BadRequest(f"requires: {version!r} is not a version", param="requires") from None
    if wanted > tuple(int(p) for p in API_VERSION.split(".")):
        raise BadRequest(
            f"requires: the model needs Ollama {version}; Juggler speaks {API_VERSION}",
            param="requires",
        )


def check_parameters(params: dict[str, Any]) -> dict[str, Any]:
    """The load options of `params`; a 400 naming `parameters.NAME` that Juggler cannot
    honour or whose value a request could not carry."""
    try:
        sampling, load = oo.split_options(params)
    except BadRequest as exc:
        raise BadRequest(
            exc.message.replace("options.", "parameters.", 1),
            param=(exc.param or "").replace("options.", "parameters.", 1),
            code=exc.code,
        ) from None
    try:
        SamplingBody.model_validate(sampling)
    except ValidationError as exc:
        err = exc.errors()[0]
        name = str(err["loc"][0]) if err["loc"] else "parameters"
        name = _OLLAMA_NAME.get(name, name)
        raise BadRequest(f"parameters.{name}: {err['msg']}", param=f"parameters.{name}") from None
    return load


def _messages(raw: list[Any]) -> list[dict[str, str]]:
    out = []
    for i, m in enumerate(raw):
        role = m.get("role") if isinstance(m, dict) else None
        content = m.get("content") if isinstance(m, dict) else None
        if role not in _ROLES or not isinstance(content, str):
            raise BadRequest(
                f"messages[{i}]: a message has a role (system, user or assistant) and text",
                param=f"messages[{i}]",
            )
        out.append({"role": role, "content": content})
    return out


def defaults_of(body: CreateBody, inherited: ModelDefaults) -> ModelDefaults:
    """The new model's SYSTEM, TEMPLATE, PARAMETERs, MESSAGEs and LICENSE (its ADAPTER is
    the caller's); raises BadRequest naming the field."""
    params = dict(inherited.parameters)
    for key, value in (body.parameters or {}).items():
        if value is not None:
            params[key] = mf.parameter_value(key, value, f"parameters.{key}")
    check_parameters(params)
    template = inherited.template if body.template is None else body.template
    if template:
        check_template(template)
    licenses = inherited.license
    if body.license is not None:
        licenses = [body.license] if isinstance(body.license, str) else list(body.license)
    return dataclasses.replace(
        inherited,
        system=inherited.system if body.system is None else body.system,
        template=template,
        parameters=params,
        messages=inherited.messages if body.messages is None else _messages(body.messages),
        license=licenses,
    )


def load_parameters(defaults: ModelDefaults) -> dict[str, Any]:
    """The load options of the model's parameters (its saved load options)."""
    return oo.split_options({k: v for k, v in defaults.parameters.items() if k in LOAD_PARAMS})[1]


def adapter_sources(body: CreateBody, paths: list[str]) -> list[str]:
    """The ADAPTERs given: uploaded blobs' digests (`adapters`) or a Modelfile's paths."""
    sources = [*(body.adapters or {}).values(), *paths]
    if len(sources) > 1:
        raise NotImplementedParam(
            "adapters", "a model runs with one LoRA adapter (give one ADAPTER)"
        )
    return sources


def check_fits(info: ModelInfo, adapter: str) -> None:
    """A 400 unless `adapter` is a LoRA GGUF made for the new model's file."""
    try:
        base = resolve_checkpoint(info)
    except CheckpointMissing as exc:
        raise BadRequest(f"adapters: the base model is not on disk ({exc.message})") from None
    if not Path(adapter).is_file():
        raise CheckpointMissing(f"adapter file not found: {adapter}", param="adapters")
    try:
        check_adapter(Path(adapter), base)
    except BadRequest as exc:
        raise BadRequest(f"adapters: {exc.message}", param="adapters") from None
