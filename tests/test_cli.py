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
