"""The backend's HTTP face: the routes (`server`), request bodies to engine values
(`requests`), the OpenAI shapes of answers (`responses`), streams to SSE (`streaming`),
and /stats and /metrics read from published snapshots (`metrics`). Runs on the event
loop; owns no engine state, it only calls the `Engine`."""
