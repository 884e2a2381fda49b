"""Whether a chat template is a reasoning model's (issue 49): it speaks of thinking
(`<think>`, `enable_thinking` or `reasoning_content`: Qwen3, DeepSeek-R1, QwQ, SmolLM3 ...).
Pure; the engine probes its template with it, the registry labels a GGUF `reasoning`."""

from __future__ import annotations

MARKS = ("<think>", "enable_thinking", "reasoning_content")


def template_reasons(source: str | None) -> bool:
    return bool(source) and any(m in str(source) for m in MARKS)
