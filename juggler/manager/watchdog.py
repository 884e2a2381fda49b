"""The watchdog: a backend that dies on its own is loaded again, options and pin included.

Owned by the owner task (owner.py), like the table. Its only side effect is a timer per
pending restart, which posts `RestartDue` to the owner. Rules:
- A ready backend whose process exits, or that stops answering and is stopped, is
  dropped at once (its slot is free) and restarted after `restart_delay(attempt)`:
  0.5 s, 1 s, 2 s, ... at most MAX_DELAY_S.
- The restart is a load like any other (serialized, decided when it leaves the queue)
  except that it never evicts anything: if its slot was taken meanwhile, the restart is
  dropped (the user's newer choice wins).
- A restart that fails to load, or a backend that dies again within STABLE_S of coming
  back, counts as the next attempt; after MAX_ATTEMPTS in a row the watchdog gives up and
  says so in health.
- Unloading the model or loading it explicitly cancels a pending restart.
- A request for the model before its restart is due loads it at once with the plan and
  the pin it had: a pin survives a watchdog reload, whichever comes first.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable
from dataclasses import dataclass

from juggler.manager import messages as m
from juggler.manager.recipes import LaunchPlan

log = logging.getLogger("juggler.manager")

MAX_ATTEMPTS = 5
MAX_DELAY_S = 30.0
#: A backend up this long before dying counts as healthy: the next restart is attempt 0.
STABLE_S = 60.0


def restart_delay(attempt: int) -> float:
    """Pure backoff: 0.5 s for the first restart, doubling, at most MAX_DELAY_S."""
    return float(min(MAX_DELAY_S, 0.5 * 2**attempt))


@dataclass(frozen=True)
class Restart:
    plan: LaunchPlan
    pinned: bool
    attempt: int
    due_at: float

    @property
    def model_name(self) -> str:
        return self.plan.info.name


class Watchdog:
    def __init__(
        self, post: Callable[[m.Message], None], counters: collections.Counter[str]
    ) -> None:
        self._post = post
        self._counters = counters
        self.pending: dict[str, Restart] = {}
        #: Consecutive failed attempts per model (kept while it is restarted).
        self.attempts: dict[str, int] = {}
        self.gave_up: set[str] = set()
        self._timers: dict[str, asyncio.TimerHandle] = {}

    def on_death(self, plan: LaunchPlan, pinned: bool, now: float, up_s: float | None) -> None:
        """A backend of `plan` died after `up_s` seconds ready (None: it never came up, a
        failed restart): schedule its restart, or give up after MAX_ATTEMPTS."""
        name = plan.info.name
        attempt = 0 if up_s is not None and up_s >= STABLE_S else self.attempts.get(name, -1) + 1
        self._stop_timer(name)
        if attempt >= MAX_ATTEMPTS:
            self.attempts.pop(name, None)
            self.pending.pop(name, None)
            self.gave_up.add(name)
            self._counters["restart_give_ups"] += 1
            log.error("manager: %s kept dying; the watchdog gave up on it", name)
            return
        self.attempts[name] = attempt
        self.gave_up.discard(name)
        delay = restart_delay(attempt)
        self.pending[name] = Restart(plan, pinned, attempt, now + delay)
        log.warning("manager: %s will be restarted in %.1f s", name, delay)
        self._timers[name] = asyncio.get_running_loop().call_later(
            delay, self._post, m.RestartDue(name)
        )

    def take(self, name: str) -> Restart | None:
        """The restart of `name` that is due now, if it was not cancelled meanwhile."""
        self._timers.pop(name, None)
        return self.pending.pop(name, None)

    def claim(self, name: str) -> Restart | None:
        """A request wants `name` before its restart is due: the pending restart, taken
        now (its timer stopped; the attempts still count)."""
        self._stop_timer(name)
        return self.pending.pop(name, None)

    def cancel(self, name: str) -> None:
        """The user unloaded or reloaded the model: no restart, no memory of failures."""
        self._stop_timer(name)
        self.pending.pop(name, None)
        self.attempts.pop(name, None)
        self.gave_up.discard(name)

    def close(self) -> None:
        for name in list(self._timers):
            self._stop_timer(name)

    def _stop_timer(self, name: str) -> None:
        timer = self._timers.pop(name, None)
        if timer is not None:
            timer.cancel()
