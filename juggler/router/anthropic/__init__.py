"""The Anthropic face: the Messages API (`POST /v1/messages`, `/v1/messages/count_tokens`,
under /v1 and /api/v1).

`wire`: its bodies and error shape; `request`: a request as the OpenAI chat body every
backend speaks (the adapter's way in); `answer`: the backend's OpenAI stream as
Anthropic's events or one `Message` (its way out); `routes`: the two routes.
"""
