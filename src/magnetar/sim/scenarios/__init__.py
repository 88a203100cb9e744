"""Scenarios for ``magnetar sim``: a workload plus faults, judged by a separate checker.

A scenario is ``run(world, options) -> Verdict``: it adds nodes to a fresh ``SimWorld`` using only
the public capability interfaces (``NodeContext``: disk, key/value stores, network, clock, rng),
drives faults from the world's seeded ``Rng``, runs the world, and hands what the clients observed
to its checker. ``BREAKS`` names the negative controls each scenario understands.
"""

from __future__ import annotations

from magnetar.base.errors import InvalidArgumentError
from magnetar.sim.scenarios import cluster, durable_log
from magnetar.sim.scenarios.base import Scenario, ScenarioOptions, Verdict
from magnetar.sim.world import SimConfig, SimWorld

SCENARIOS: dict[str, Scenario] = {
    "durable-log": durable_log.run,
    "cluster": cluster.run,
}

#: The world a scenario runs in unless the caller gives one.
DEFAULT_CONFIGS: dict[str, SimConfig] = {"cluster": cluster.SIM_CONFIG}

BREAKS: dict[str, frozenset[str]] = {
    "durable-log": frozenset({durable_log.BREAK_ACK_BEFORE_FSYNC}),
    "cluster": cluster.BREAKS,
}


def run_scenario(name: str, seed: int, options: ScenarioOptions | None = None,
                 config: SimConfig | None = None) -> tuple[SimWorld, Verdict]:
    """Run scenario ``name`` with ``seed``; returns the world (for its trace) and the verdict."""
    scenario = SCENARIOS.get(name)
    if scenario is None:
        raise InvalidArgumentError(f"unknown scenario {name!r}; known: {', '.join(sorted(SCENARIOS))}")
    options = options or ScenarioOptions()
    unknown = options.breaks - BREAKS.get(name, frozenset())
    if unknown:
        raise InvalidArgumentError(f"scenario {name!r} cannot break {', '.join(sorted(unknown))}")
    world = SimWorld(seed, config or DEFAULT_CONFIGS.get(name))
    return world, scenario(world, options)


__all__ = ["BREAKS", "SCENARIOS", "Scenario", "ScenarioOptions", "Verdict", "run_scenario"]
