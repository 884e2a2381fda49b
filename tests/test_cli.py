"""CLI argument handling that needs no server."""

from __future__ import annotations

from juggler.cli.main import fold_list_option


def test_max_loaded_models_takes_several_numbers() -> None:
    """Seed 000: `--max-loaded-models LLMS EMBEDDINGS RERANKINGS`."""
    argv = ["serve", "--max-loaded-models", "5", "2", "-1", "--port", "1"]
    assert fold_list_option(argv) == ["serve", "--max-loaded-models", "5 2 -1", "--port", "1"]
    assert fold_list_option(["serve", "--max-loaded-models", "3"]) == [
        "serve",
        "--max-loaded-models",
        "3",
    ]


def test_the_pinned_slots_warning_appears_only_when_every_slot_is_pinned() -> None:
    """Seed 002: "If all slots for that model type are occupied by pinned models, the CLI
    will output a pre-emptive warning alerting you that loading will fail"."""
    from juggler.cli.residency_cmd import pinned_slots_warning

    def health(*pins: bool, limit: int = 2) -> dict[str, object]:
        loaded = [{"model_name": f"m{i}", "type": "llm", "pinned": p} for i, p in enumerate(pins)]
        return {"max_models": {"llm": limit}, "all_models_loaded": loaded}

    assert pinned_slots_warning(health(True, True), "llm", "new") is not None
    assert pinned_slots_warning(health(True, False), "llm", "new") is None
    assert pinned_slots_warning(health(True), "llm", "new") is None  # a free slot
    assert pinned_slots_warning(health(True, True), "llm", "m0") is None  # already loaded
    assert pinned_slots_warning(health(True, True), "embedding", "e") is None
    assert pinned_slots_warning(health(True, True, limit=-1), "llm", "new") is None
