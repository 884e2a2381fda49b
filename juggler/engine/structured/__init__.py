"""Structured output: JSON-schema and GBNF grammars, tool calls (prompt, grammar, parser)."""
