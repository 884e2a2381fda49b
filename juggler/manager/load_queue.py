"""The load queue: queued loads and the one running (seed 000: "WrappedServer loads shall
be serialized"). Owned by the owner task; callers that want a model already queued join
its job instead of queueing another. No I/O.
"""

from __future__ import annotations

import asyncio
import collections
from dataclasses import dataclass, field

from juggler.manager.lease import Lease
from juggler.manager.policy import LoadRequest
from juggler.manager.recipes import LaunchPlan
from juggler.manager.snapshot import ServerSnapshot


@dataclass(eq=False)
class LoadJob:
    """One queued load. `acquirers` get a Lease (counted in flight atomically when the
    load completes: auto-load protection), `loaders` get a snapshot."""

    plan: LaunchPlan
    is_explicit: bool
    #: /load's `pinned` when given; None leaves the pin as it is.
    pin: bool | None = None
    acquirers: list[asyncio.Future[Lease | None]] = field(default_factory=list)
    loaders: list[asyncio.Future[ServerSnapshot]] = field(default_factory=list)
    has_retried: bool = False
    evict_all: bool = False
    #: The watchdog's restart of a backend that died (its attempt number), or None.
    restart_attempt: int | None = None

    @property
    def is_restart(self) -> bool:
        return self.restart_attempt is not None

    @property
    def model_name(self) -> str:
        return self.plan.info.name

    def request(self) -> LoadRequest:
        """This load as the policy sees it; an auto-load takes the model with any options."""
        plan = self.plan
        return LoadRequest(
            plan.info.name,
            plan.model_type,
            plan.device,
            plan.npu_backend,
            plan.launch_key() if self.is_explicit else None,
            self.evict_all,
            plan.vram_bytes,
        )


class LoadQueue:
    def __init__(self) -> None:
        self._waiting: collections.deque[LoadJob] = collections.deque()
        #: The load running now (at most one).
        self.active: LoadJob | None = None

    def __len__(self) -> int:
        return len(self._waiting) + (self.active is not None)

    def jobs(self) -> list[LoadJob]:
        """The running load first, then the waiting ones in order."""
        return [*([self.active] if self.active else []), *self._waiting]

    def find(self, name: str) -> LoadJob | None:
        return next((j for j in self.jobs() if j.model_name == name), None)

    def add_acquirer(self, name: str, future: asyncio.Future[Lease | None]) -> bool:
        """Join a request to the queued or running load of `name`; False when none."""
        job = self.find(name)
        if job is not None:
            job.acquirers.append(future)
        return job is not None

    def add_loader(
        self, plan: LaunchPlan, pin: bool | None, future: asyncio.Future[ServerSnapshot]
    ) -> None:
        """An explicit /load joins a load of the same model with the same launch options
        (a waiting auto-load takes its options first); otherwise it queues its own."""
        key = plan.launch_key()
        for job in self.jobs():
            if job.model_name != plan.info.name:
                continue
            if job is not self.active and not job.is_explicit:
                job.plan, job.is_explicit = plan, True
            if job.plan.launch_key() == key:
                job.pin = pin if pin is not None else job.pin
                job.loaders.append(future)
                return
        self._waiting.append(LoadJob(plan, is_explicit=True, pin=pin, loaders=[future]))

    def append(self, job: LoadJob) -> None:
        self._waiting.append(job)

    def head(self) -> LoadJob | None:
        """The next load to leave the queue, while none is running."""
        return self._waiting[0] if self.active is None and self._waiting else None

    def pop_head(self) -> LoadJob:
        return self._waiting.popleft()

    def retry_first(self, job: LoadJob) -> None:
        """Put a failed load back at the head for its one retry."""
        self._waiting.appendleft(job)

    def drain(self) -> list[LoadJob]:
        """Every job, running or waiting; the queue is empty afterwards."""
        jobs = self.jobs()
        self._waiting.clear()
        self.active = None
        return jobs
