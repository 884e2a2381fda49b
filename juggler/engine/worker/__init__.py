"""The threads that each own one llama.cpp context.

`owner_thread`: the thread, inbox and outbox every worker shares, and what happens when
its loop fails. `worker`: the generation worker, made of parts with one owner each:
`table` (the sessions), `kv` (KV bookkeeping: rollback, cached sequences, parking,
compaction), `decoder` (the batch and the decode), `inputs` (input deltas and chat
speculation), `generation` (tokens to text, stop conditions, stats), `session_api`
(each command, and the stateless requests waiting); `policy` holds their pure room
decisions. `embed`: the embedding / reranking worker."""
