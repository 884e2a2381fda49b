"""Whether a chat template is a reasoning model's (issue 49): it speaks of thinking
(`<think>`, `enable_thinking` or `reasoning_content`: Qwen3, DeepSeek-R1, QwQ, SmolLM3 ...),
or it is gpt-oss's harmony template (its messages go on channels, `<|channel|>analysis` for
the thinking and `final` for the answer). Pure; the engine probes its template with it,
the registry labels a GGUF `reasoning`."""

from __future__ import annotations

MARKS = ("<think>", "enable_thinking", "reasoning_content")


def template_harmony(source: str | None) -> bool:
    """gpt-oss's template: it writes `<|channel|>` and names the analysis and final channels."""
    text = str(source or "")
    return "<|channel|>" in text and "analysis" in text and "final" in text


def template_reasons(source: str | None) -> bool:
    return bool(source) and (any(m in str(source) for m in MARKS) or template_harmony(source))
