"""Commands are immutable once sent: one frozen type per kind."""

from __future__ import annotations

import asyncio
import dataclasses
import typing

import pytest

from juggler.engine.llama.sampling import SamplingParams
from juggler.engine.schedule import messages as m
from juggler.engine.schedule.stream import StreamSink
from juggler.errors import EngineDead


def every_kind(reply: asyncio.Future[typing.Any]) -> list[m.Command]:
    sink = StreamSink()
    return [
        m.CreateSession("s", reply),
        m.AppendInput("s", reply, text="hi"),
        m.Generate("s", reply, SamplingParams(), sink, 0.0),
        m.Cancel("s", reply),
        m.EndSession("s", reply),
        m.Downsize(0, reply),
        m.DropAdapter(0, "a", reply),
        m.EraseSlot(0, 1, reply),
        m.Complete("r", reply, (1, 2), SamplingParams(), sink, 0.0),
        m.Embed("r", reply, ((1,),)),
        m.Rerank("r", reply, ((1,),)),
        m.SessionGone("s", 0),
        m.RequestDone("r", 0),
        m.WorkerDied(0, EngineDead("gone")),
        m.Shutdown(),
        m.Recheck(),
    ]


def test_every_command_kind_is_frozen_once_made() -> None:
    async def go() -> None:
        cmds = every_kind(asyncio.get_running_loop().create_future())
        assert {type(c) for c in cmds} == set(typing.get_args(m.Command))
        for cmd in cmds:
            assert dataclasses.is_dataclass(cmd)
            with pytest.raises(dataclasses.FrozenInstanceError):
                cmd.session_id = "other"  # type: ignore[union-attr]
            with pytest.raises(dataclasses.FrozenInstanceError):
                cmd.extra = 1  # type: ignore[union-attr]

    asyncio.run(go())


def test_reply_of_finds_the_future_of_commands_that_wait() -> None:
    async def go() -> None:
        reply = asyncio.get_running_loop().create_future()
        waits = [c for c in every_kind(reply) if m.reply_of(c) is reply]
        assert len(waits) == 11
        assert m.reply_of(m.Shutdown()) is None

    asyncio.run(go())
