"""A created model's Modelfile on OpenAI's and Anthropic's routes, as Ollama applies it on
its OpenAI-compatible ones: every request for the model meets its settings here (the
OpenAI routes' `_generate` and `/v1/responses`, Anthropic's `/v1/messages`), the same way
Ollama's `/api/chat` meets them (`ollama/applied`). Pure but for the book's read.

- PARAMETERs are defaults: a request's own field wins, one by one (`num_predict` is
  `max_tokens`, unless the request gives `max_completion_tokens`).
- Chat (OpenAI's, Lemonade's and Anthropic's, whose `system` is the chat's first
  message): the MESSAGEs come before the conversation, and the SYSTEM first unless the
  request starts with a system (or developer) message of its own; a TEMPLATE renders the
  prompt (sent to the backend in `juggler_prompt`; tools and images are refused with it).
- `/v1/completions` is a raw completion, as Juggler's completions always are: the
  PARAMETERs apply, the SYSTEM, MESSAGEs and TEMPLATE do not (as `/api/generate`'s
  `raw: true`).
- The Responses API: the SYSTEM is the `instructions` unless the request brings its own
  or starts its input with a system or developer message; the MESSAGEs come before the
  input of a new conversation (not of one that continues a stored response);
  `temperature`, `top_p` and `num_predict` (`max_output_tokens`) are defaults under the
  request's, and the PARAMETERs the Responses API has no field for (`stop`, `seed`,
  `top_k` ...) reach the backend in `juggler_sampling`. A model with a TEMPLATE is a 400
  there (its prompt is rendered by the model's chat template, on an engine session).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from juggler.api.openai import PROMPT_FIELD, SAMPLING_FIELD
from juggler.errors import BadRequest
from juggler.router.core.modelfiles import OPENAI_SAMPLING, ModelDefaults, book_of
from juggler.router.core.prompt_template import template_prompt

if TYPE_CHECKING:
    from juggler.router.core.deps import RouterState

CHAT, COMPLETION = "/v1/chat/completions", "/v1/completions"
#: The OpenAI fields of the Responses API's sampling, and their names there.
_RESPONSES = {"temperature": "temperature", "top_p": "top_p", "max_tokens": "max_output_tokens"}
_OWN_SYSTEM = ("system", "developer")


def defaults_of(state: RouterState, model: str) -> ModelDefaults:
    """The Modelfile of the model a request names (none for a model not created so)."""
    info = state.registry.find(model)
    return ModelDefaults() if info is None else book_of(state).get(info.name)


def sampling(defaults: ModelDefaults) -> dict[str, Any]:
    """The PARAMETERs as OpenAI fields (`num_predict` -> `max_tokens`; a negative one is
    no limit). Ollama's create checked them."""
    return {
        OPENAI_SAMPLING[k]: v
        for k, v in defaults.sampling().items()
        if k in OPENAI_SAMPLING and not (k == "num_predict" and v < 0)
    }


def _under(body: dict[str, Any], fields: dict[str, Any]) -> None:
    for key, value in fields.items():
        if key == "max_tokens" and body.get("max_completion_tokens") is not None:
            continue
        if body.get(key) is None:
            body[key] = value


def _role(item: Any) -> Any:
    return item.get("role") if isinstance(item, dict) else None


def apply_modelfile(state: RouterState, model: str, path: str, body: dict[str, Any]) -> None:
    """`body` (an OpenAI chat or completion body) with the model's Modelfile applied."""
    defaults = defaults_of(state, model)
    if defaults.is_empty():
        return
    _under(body, sampling(defaults))
    messages = body.get("messages")
    if path != CHAT or not isinstance(messages, list) or not messages:
        return
    history = [dict(m) for m in defaults.messages]
    if defaults.system and _role(messages[0]) not in _OWN_SYSTEM:
        history.insert(0, {"role": "system", "content": defaults.system})
    body["messages"] = [*history, *messages]
    if defaults.template:
        body[PROMPT_FIELD] = template_prompt(defaults.template, body["messages"], body.get("tools"))


def apply_modelfile_responses(state: RouterState, model: str, body: dict[str, Any]) -> None:
    """A Responses API body with the model's Modelfile applied (see the module's notes)."""
    defaults = defaults_of(state, model)
    if defaults.is_empty():
        return
    fields = sampling(defaults)
    if defaults.template:
        raise BadRequest(
            f"model: {model!r} has a TEMPLATE of its own, which the Responses API cannot "
            "render (it uses the model's chat template); use /v1/chat/completions",
            param="model",
        )
    _under(body, {_RESPONSES[k]: v for k, v in fields.items() if k in _RESPONSES})
    others = {k: v for k, v in fields.items() if k not in _RESPONSES}
    if others:
        body[SAMPLING_FIELD] = others
    items = body.get("input")
    items = [{"role": "user", "content": items}] if isinstance(items, str) else items
    if not isinstance(items, list):
        return
    own = bool(items) and _role(items[0]) in _OWN_SYSTEM
    if defaults.system and body.get("instructions") is None and not own:
        body["instructions"] = defaults.system
    if defaults.messages and body.get("previous_response_id") is None:
        body["input"] = [*(dict(m) for m in defaults.messages), *items]
