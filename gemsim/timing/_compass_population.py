"""FedCompass's scheduler over a population: K slots serving N clients (`CompassPopulationRun`).

The paper's scheduler (`_compass_run.py`) keeps one speed estimate per client and assigns
each of its tasks; its clients are persistent. Over a population the task of a slot is its
client's: a free slot chooses a client as every population run does (`_selection.py`, among
those not in another slot's task), and the scheduler assigns that client's task from the
client's own estimate, so the estimates are kept per client, N of them:

- a client not seen yet takes ``q_max`` steps in no group, and its arrival is applied
  alone (the trace's ``buffer`` 0), as every worker's first task in the paper;
- a client seen before joins or creates an arrival group from its estimate, as a worker;
- a client that arrived in its group's time waits in the group's buffer and holds its slot
  (it waits for the group's model, as the paper's clients do); once the group is
  aggregated its slots are freed one at a time, fastest client first, each choosing its
  next client and starting its task before the next one is freed. A population of N = K
  clients therefore gives the persistent workers' trace: each freed slot finds only its own
  client free.

Each task's compute time is the sum of its steps' draws of its slot's per-batch stream,
divided by its client's speed. The clients stay up (no churn, no availability): a group's
timers assume its members arrive.
"""

from __future__ import annotations

from ._calendar import Calendar, client_speeds
from ._compass_run import CompassRun
from ._outcome import TASK_COMMITTED, ClientReport
from ._population import Population
from ._population_run import TaskLog, check_slowest, tasks_report
from ._selection import Selector
from ._server_protocols import Compass
from ._state import OFF, SimState


class CompassPopulationRun(CompassRun):
    """The protocol object of FedCompass's run over a population (the module docstring)."""

    def __init__(
        self,
        state: SimState,
        protocol: Compass,
        population: Population,
        seed: int,
        schedule: int,
    ) -> None:
        n, k = population.n_clients, state.spec.n_workers
        super().__init__(state, protocol, n)
        self.population, self.schedule = population, schedule
        self.speeds = client_speeds(population, seed)
        if population.draws_speeds:  # (at speed 1 the slots' own streams checked it)
            check_slowest(state.spec.workers, self.speeds, protocol.q_max)
        self.true_speed = memoryview(self.speeds)
        self.busy = bytearray(n)
        self.selector = Selector(population, Calendar(population, schedule), self.busy, seed)
        self.tasks = TaskLog()
        self.task_of = [-1] * k
        self.who = [-1] * k  # the slot's client
        self.clients: list[int] = []  # the trace's client column

    def begin(self) -> None:
        """Every slot chooses its first client at t = 0, in index order; none pulls."""
        for w in range(self.state.spec.n_workers):
            self.state.start_life(w)
            self._take(w, 0.0, False)

    def _take(self, w: int, now: float, pull: bool) -> None:
        """Slot ``w`` is free: it chooses a client, which is assigned its task and starts."""
        if now > self.state.horizon:  # past a SecondsBudget's end: nothing more is started
            self.state.phase[w] = OFF
            return
        pick = self.selector.select(now)
        if pick is None:  # K <= N and nobody goes down: a client is always free
            raise RuntimeError(f"slot {w} found no free client at t = {now}")
        c = pick[0]
        self.busy[c] = 1
        self.who[w] = c
        self.task_of[w] = self.tasks.start(c, w, now)
        self._assign(w, now)
        self.arm(w, pull)

    def arm(self, w: int, pull: bool) -> None:
        """Slot ``w``'s task: pull (when ``pull``), its steps' draws of the slot's stream
        summed in order and divided by its client's speed, push."""
        self.state._tracked_arm(w, pull, self.steps[w], self.true_speed[self.who[w]])  # noqa: SLF001

    def _row(self, w: int, k: int) -> None:
        self.clients.append(self.who[w])
        self.tasks.end(self.task_of[w], self.state.env._now, TASK_COMMITTED, k - 1)

    def _next(self, w: int, now: float) -> None:
        """Slot ``w``'s client is released, and the slot chooses its next one now."""
        self.busy[self.who[w]] = 0
        self._take(w, now, True)

    def report(self, duration: float) -> ClientReport:
        """Per-client speed and tasks (`PopulationRun.report`); every client is up."""
        return tasks_report(self.population, self.schedule, self.speeds, self.tasks, duration)
