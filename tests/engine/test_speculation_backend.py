"""Speculative decoding on a real SmolLM2 backend (issue 16).

"Greedy output must be identical to non-speculative decoding; with sampling, use the
standard accept/reject rule so the output distribution is unchanged (test it
statistically)."
"""

from __future__ import annotations

import collections
import json
from typing import Any

import httpx
import pytest

from tests.engine.conftest import Backend

pytestmark = pytest.mark.slow

DOC = (
    "The lighthouse keeper climbed the spiral stairs every evening at dusk. "
    "He trimmed the wick, polished the great lens, and wound the clockwork that turned it. "
    "Ships passing the headland counted the flashes: three short, one long. "
)
QUOTE = [
    {"role": "system", "content": "You repeat text exactly."},
    {"role": "user", "content": f"Repeat this text exactly:\n\n{DOC}"},
]


def chat(c: httpx.Client, spec: bool, n: int = 64, **more: Any) -> dict[str, Any]:
    body = {"messages": QUOTE, "max_tokens": n, "temperature": 0, "speculative": spec, **more}
    r = c.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    data: dict[str, Any] = r.json()
    return data


def stats(c: httpx.Client) -> dict[str, Any]:
    data: dict[str, Any] = c.get("/stats").json()
    return data


def test_greedy_output_is_identical_and_drafts_are_accepted(smol_backend: Backend) -> None:
    with smol_backend.client() as c:
        plain = chat(c, False)["choices"][0]["message"]["content"]
        before = stats(c)
        spec = chat(c, True)["choices"][0]["message"]["content"]
        after = stats(c)
        assert spec == plain
        assert "lighthouse keeper" in spec  # the model quotes: drafts can be right
        drafted = after["spec_draft_tokens_total"] - before["spec_draft_tokens_total"]
        accepted = after["spec_accepted_tokens_total"] - before["spec_accepted_tokens_total"]
        assert drafted > 0 and accepted > drafted / 2, (drafted, accepted)
        # Streamed, the same text arrives (several tokens per event when drafts hold).
        body = {"messages": QUOTE, "max_tokens": 64, "temperature": 0, "stream": True}
        with c.stream("POST", "/v1/chat/completions", json=body) as r:
            parts = [
                json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
                for line in r.iter_lines()
                if line.startswith("data: {")
            ]
        assert "".join(parts) == plain


def test_sampled_output_has_the_same_distribution(smol_backend: Backend) -> None:
    """Each position is drawn once from the model's own distribution with or without
    drafts (a draft token is kept only when the draw equals it), so seed for seed the
    outputs agree, and across 24 seeds the first words' counts are the same."""
    prompt = f"{DOC}\nOnce more: {DOC[:60]}"

    def one(args: tuple[int, bool]) -> str:
        seed, spec = args
        body = {
            "prompt": prompt,
            "max_tokens": 12,
            "temperature": 1.0,
            "seed": seed,
            "speculative": spec,
        }
        with smol_backend.client() as c:
            r = c.post("/v1/completions", json=body)
            assert r.status_code == 200, r.text
            text: str = r.json()["choices"][0]["text"]
            return text

    # One at a time, after a warm-up pass: llama.cpp's logits depend slightly on the batch
    # and on where the KV cells of a reused prefix lie, which alone moves sampled text
    # (seen here with speculation off on both sides: 4 requests at once, or the first
    # pass after other prompts); once each request finds the same cache, passes repeat.
    seeds = list(range(24))
    for s in seeds:
        one((s, False))
    plain = [one((s, False)) for s in seeds]
    spec = [one((s, True)) for s in seeds]
    assert len(set(plain)) > 3  # sampling really varies with the seed
    same = sum(a == b for a, b in zip(plain, spec, strict=True))
    assert same >= 22, list(zip(plain, spec, strict=True))
    first = collections.Counter(t.split()[0] if t.split() else "" for t in plain)
    first_spec = collections.Counter(t.split()[0] if t.split() else "" for t in spec)
    assert sum((first - first_spec).values()) <= 4
