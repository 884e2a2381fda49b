"""Juggler: many local language models hot behind one OpenAI-compatible API."""

from __future__ import annotations

__version__ = "0.1.0"
