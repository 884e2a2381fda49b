"""Getting work to workers and results back.

`messages`: one frozen command type per kind. `master`: the one task that consumes the
global ingress queue and owns session -> worker placement, load and affinity, counters,
and whether the engine is dead. `batch`: the pure plan of one worker tick. `outbox` and
`stream`: how a worker thread hands replies and tokens to the event loop."""
