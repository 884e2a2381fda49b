"""Session input: text and chat deltas become a session's pending tokens.

`SessionInputs` runs on the worker thread. Chat sessions render their template
incrementally (`chat.ChatState`): only the new turn is tokenized, or, when a template
rewrites earlier turns, the token-level difference. After a user turn the assistant
header is appended at once, on speculation: the worker prefills it with the turn and
keeps the logits, so a /generate that follows samples its first token without another
decode. More input instead takes the header back out (`drop_speculation`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from juggler.engine.cache.prefix_cache import common_prefix_len
from juggler.engine.llama.chat import ChatState, ChatTemplate
from juggler.engine.llama.ports import Logits, Vocab
from juggler.engine.media_images import tokenize_text
from juggler.engine.worker.kv import KvBook
from juggler.engine.worker.policy import overflow_message, room_error
from juggler.engine.worker.session import Session
from juggler.errors import BadRequest, ContextOverflow


class SessionInputs:
    def __init__(self, vocab: Vocab, template: ChatTemplate, kv: KvBook) -> None:
        self.vocab = vocab
        self.template = template
        self.kv = kv
        #: Tokens one sequence may hold (--ctx-size; at most the worker's cells).
        self.n_ctx = kv.max_seq

    def check_room(self, held: int, num_new: int) -> None:
        """Refuse input that cannot fit (see `policy.room_error`)."""
        kv = self.kv
        error = room_error(
            held=held, num_new=num_new, live_cells=kv.live(), n_ctx=self.n_ctx, n_cells=kv.n_ctx
        )
        if error is not None:
            raise error

    def append(
        self,
        s: Session,
        text: str | None,
        messages: Sequence[dict[str, Any]] | None,
        tools: list[dict[str, Any]] | None = None,
        header_suffix: str | None = None,
    ) -> int:
        """Append a text or chat delta to the session's pending input; returns how many
        tokens it added. `tools`: what a template that renders tools itself gets from now
        on. Raises BadRequest / ContextOverflow (nothing appended)."""
        self.drop_speculation(s)
        if messages is not None:
            num_new = self._chat_delta(s, messages, tools)
            if header_suffix is not None and s.chat is not None:
                s.chat.header_suffix = header_suffix
            return num_new
        if s.chat is not None:
            raise BadRequest("this is a chat session: send messages, not text", param="text")
        total = s.n_past + len(s.pending)
        add_special = total == 0 and self.vocab.add_bos
        new = tokenize_text(self.vocab, text or "", add_special=add_special)
        self.check_room(total, len(new))
        s.pending.extend(new)
        return len(new)

    def speculate_header(self, s: Session) -> None:
        """After a user turn, append the assistant header now (see the module doc)."""
        assert s.chat is not None
        text = self._header(s.chat)
        if not text:
            return
        header = self.vocab.tokenize(text, add_special=False)
        if s.n_past + len(s.pending) + len(header) + 1 > self.n_ctx:
            return  # no room: /generate will say so
        s.pending.extend(header)
        s.spec_header = (text, len(header))

    def drop_speculation(self, s: Session) -> None:
        """Take a speculative assistant header back out (pending or already in KV)."""
        if s.spec_header is None:
            return
        _, n = s.spec_header
        s.spec_header = None
        s.saved_logits = None
        unsent = min(n, len(s.pending))
        del s.pending[len(s.pending) - unsent :]
        if n > unsent:
            self.kv.rollback(s, s.n_past - (n - unsent))

    def prepare_generate(self, s: Session) -> tuple[bool, Logits | None]:
        """Before a generation: append a chat session's assistant header (unless it is
        there already on speculation) and check there is room for a token. Returns
        whether the reply continues the last assistant message, and the logits a
        speculative prefill kept (None if there are none)."""
        if s.chat is None:
            self.check_room(s.n_past + len(s.pending), 1)
            return False, None
        msgs = s.chat.messages
        continues = bool(msgs) and msgs[-1].get("role") == "assistant"
        prompt = "" if continues else self._header(s.chat)
        saved = None
        if s.spec_header is not None and s.spec_header[0] == prompt:
            s.chat.text += prompt  # already appended (and maybe decoded) at /input
            s.spec_header = None
            saved, s.saved_logits = s.saved_logits, None
            prompt = ""
        else:
            self.drop_speculation(s)
        if prompt:
            header = self.vocab.tokenize(prompt, add_special=False)
            self.check_room(s.n_past + len(s.pending), len(header) + 1)
            s.pending.extend(header)
            s.chat.text += prompt
        return continues, saved

    def _header(self, chat: ChatState) -> str:
        """The assistant header a generation starts with (and what follows it)."""
        prompt = self.template.generation_prompt(chat.messages, chat.tools)
        return prompt + chat.header_suffix if prompt else ""

    def _chat_delta(
        self, s: Session, messages: Sequence[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> int:
        """Render the chat template incrementally; append only the new turn's tokens."""
        if s.chat is None:
            if s.tokens or s.pending:
                raise BadRequest(
                    "this is a text session: send text, not messages", param="messages"
                )
            s.chat = ChatState()
        chat = s.chat
        if tools is not None:
            chat.tools = tools
        bos = self.template.bos_token
        delta = chat.delta_for(self.template, list(messages))
        if delta is not None:
            held = s.n_past + len(s.pending)
            add_special = held == 0 and self.vocab.add_bos and not (bos and delta.startswith(bos))
            new = tokenize_text(self.vocab, delta, add_special=add_special)
            self.check_room(held, len(new))
            s.pending.extend(new)
            chat.text += delta
            num_new = len(new)
        else:
            # The template rewrote earlier turns: diff at the token level instead.
            full = chat.full_text(self.template, list(messages))
            add_special = self.vocab.add_bos and not (bos and full.startswith(bos))
            target = tokenize_text(self.vocab, full, add_special=add_special)
            if len(target) >= self.n_ctx:
                raise ContextOverflow(overflow_message(len(target), self.n_ctx))
            keep = common_prefix_len([*s.tokens, *s.pending], target)
            if keep < s.n_past:
                self.kv.rollback(s, keep)
            s.pending = target[s.n_past :]
            num_new = len(target) - keep
            chat.text = full
        chat.messages.extend(dict(m) for m in messages)
        return num_new
