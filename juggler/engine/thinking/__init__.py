"""Reasoning models: a model's thinking (`<think>...</think>`) told apart from its answer.

split      the model's output, as it streams, into thinking and answer (pure)
template   what a chat template does with thinking, and what a request asks of it
grammar    structured output (response_format, json_schema, tools) for the answer only
"""
