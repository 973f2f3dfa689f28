"""Evolutionary search under a FLOPs budget (the ViT-ResNAS paper, Sec. 2.3), and random search for comparison.

Every candidate lies in the window [window * C, C] of the budget C and is evaluated once. The population
starts with ``population`` random architectures; each iteration takes the ``parents`` best of everything
evaluated so far and adds ``mutations`` mutants (each gene re-drawn with probability ``p_mutate``) and
``crossovers`` children (each gene from one of two parents). The paper: P0 = 500, 20 iterations, 75 parents,
75 + 75 children, p = 0.3.

Runs are seeded and resumable: iteration t draws from ``Random((seed, t))`` and only from what iterations
before t evaluated, so a run that reloads its ``history.jsonl`` regenerates the same candidates and only
evaluates the missing ones.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from .space import SearchSpace, arch_key

__all__ = ["SearchResult", "evolutionary_search", "random_search", "InfeasibleWindowError", "load_history"]


class InfeasibleWindowError(ValueError):
    """No architecture of the space could be drawn inside the FLOPs window."""


@dataclass
class SearchResult:
    """history: one record per evaluated candidate ({iteration, origin, arch, flops, fitness}), in order."""

    history: list[dict[str, Any]] = field(default_factory=list)
    budget: int = 0
    window: tuple[float, float] = (0.0, 0.0)

    @property
    def best(self) -> dict[str, Any]:
        return max(self.history, key=lambda r: r["fitness"])

    def best_after(self, evaluations: int) -> float:
        """Best fitness among the first ``evaluations`` candidates."""
        return max(r["fitness"] for r in self.history[:evaluations])


def _rng(seed: int, iteration: int) -> random.Random:
    return random.Random(seed * 1_000_003 + iteration)


def _mutate(space: SearchSpace, arch: dict, rng: random.Random, p: float) -> dict:
    child = json.loads(json.dumps(arch))
    if rng.random() < p:
        child["global_tokens"] = rng.choice(space.global_tokens)
    for s in range(space.num_stages):
        if rng.random() < p:
            child["dims"][s] = rng.choice(space.dims[s])
        for i, skippable in enumerate(space.skippable[s]):
            present = child["heads"][s][i] > 0
            if skippable and rng.random() < p:
                present = not present
                child["heads"][s][i] = rng.choice(space.heads[s]) if present else 0
                child["mlp_hidden"][s][i] = rng.choice(space.mlp_hidden[s]) if present else 0
                continue
            if present and rng.random() < p:
                child["heads"][s][i] = rng.choice(space.heads[s])
            if present and rng.random() < p:
                child["mlp_hidden"][s][i] = rng.choice(space.mlp_hidden[s])
    return child


def _crossover(space: SearchSpace, a: dict, b: dict, rng: random.Random) -> dict:
    child: dict[str, Any] = {"global_tokens": rng.choice([a, b])["global_tokens"], "dims": [], "heads": [],
                             "mlp_hidden": []}
    for s in range(space.num_stages):
        child["dims"].append(rng.choice([a, b])["dims"][s])
        heads, hidden = [], []
        for i in range(space.depths[s]):
            src = rng.choice([a, b])  # a block's heads and FFN size travel together (so do removals)
            heads.append(src["heads"][s][i])
            hidden.append(src["mlp_hidden"][s][i])
        child["heads"].append(heads)
        child["mlp_hidden"].append(hidden)
    return child


def _flops_range(space: SearchSpace, flops: Callable[[dict], int]) -> tuple[int, int]:
    low = min(flops(space.smallest(g)) for g in space.global_tokens)
    high = max(flops(space.largest(g)) for g in space.global_tokens)
    return low, high


def _check_options(population: int, iterations: int, parents: int, mutations: int, crossovers: int,
                   window: float) -> None:
    for name, value in (("population", population), ("parents", parents)):
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    if iterations < 0 or mutations < 0 or crossovers < 0:
        raise ValueError("iterations, mutations and crossovers must be >= 0")
    if not 0.0 < window <= 1.0:
        raise ValueError(f"window must be in (0, 1], got {window}")


class _Window:
    """Draws architectures not seen before with FLOPs in [low, high] (each architecture's FLOPs counted once)."""

    def __init__(self, space: SearchSpace, flops: Callable[[dict], int], low: float, high: float,
                 max_tries: int) -> None:
        self.space, self.flops, self.low, self.high, self.max_tries = space, flops, low, high, max_tries
        self.seen: set[str] = set()
        self.flops_of: dict[str, int] = {}

    def _accept(self, arch: dict) -> bool:
        key = arch_key(arch)
        if key in self.seen:
            return False
        if key not in self.flops_of:
            self.flops_of[key] = self.flops(arch)
        return self.low <= self.flops_of[key] <= self.high

    def draw(self, make: Callable[[], dict]) -> dict | None:
        """The first of up to ``max_tries`` architectures from ``make()`` inside the window (then marked seen)."""
        for _ in range(self.max_tries):
            arch = make()
            if self._accept(arch):
                self.seen.add(arch_key(arch))
                return arch
        return None

    def infeasible(self) -> InfeasibleWindowError:
        lo_all, hi_all = _flops_range(self.space, self.flops)
        return InfeasibleWindowError(
            f"no architecture of space {self.space.name!r} has FLOPs in [{self.low:.4g}, {self.high:.4g}] after "
            f"{self.max_tries} draws; the space spans about [{lo_all:.4g}, {hi_all:.4g}] FLOPs: choose a budget "
            "inside it or widen the window")


def _makers(space: SearchSpace, iteration: int, rng: random.Random, history: list[dict[str, Any]],
            population: int, parents: int, mutations: int, crossovers: int,
            p_mutate: float) -> list[tuple[str, Callable[[], dict]]]:
    """(origin, make) per candidate of ``iteration``: random ones first, then children of the best so far."""
    if iteration == 0:
        return [("random", lambda: space.sample(rng))] * population
    pool = [r["arch"] for r in sorted(history, key=lambda r: r["fitness"], reverse=True)[:parents]]
    return ([("mutation", lambda: _mutate(space, rng.choice(pool), rng, p_mutate))] * mutations
            + [("crossover", lambda: _crossover(space, rng.choice(pool), rng.choice(pool), rng))] * crossovers)


class _Recorder:
    """Appends new records to ``history.jsonl`` (flushed per line) and moves the progress bar."""

    def __init__(self, path: str | Path | None, total: int, progress: bool) -> None:
        self.file = open(path, "a") if path else None
        self.bar = None
        if progress:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc="evolution", unit="arch")

    def add(self, record: dict[str, Any], new: bool, best: float) -> None:
        if new and self.file is not None:
            self.file.write(json.dumps(record) + "\n")
            self.file.flush()
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(best=f"{best:.4g}")

    def __enter__(self) -> "_Recorder":
        return self

    def __exit__(self, *exc: object) -> None:
        if self.file is not None:
            self.file.close()
        if self.bar is not None:
            self.bar.close()


def evolutionary_search(
    space: SearchSpace,
    fitness: Callable[[dict[str, Any]], float] | None,
    flops_budget: float,
    seed: int = 0,
    population: int = 500,
    iterations: int = 20,
    parents: int = 75,
    mutations: int = 75,
    crossovers: int = 75,
    p_mutate: float = 0.3,
    window: float = 0.975,
    flops: Callable[[dict[str, Any]], int] | None = None,
    max_tries: int = 20_000,
    history_path: str | Path | None = None,
    progress: bool = False,
    *,
    score: Callable[[list[dict[str, Any]]], list[float]] | None = None,
    cached: Sequence[dict[str, Any]] | None = None,
    write_history: bool = True,
) -> SearchResult:
    """Search ``space`` for the architecture of highest ``fitness(arch)`` with FLOPs in [window*C, C].

    Each iteration draws all its candidates first (draws never depend on the fitness of their own iteration),
    then scores the new ones in one call ``score(archs) -> fitnesses`` (default: ``fitness`` per arch), so a
    caller may split that call across processes; the parents of the next iteration are chosen after it.
    flops: FLOPs of an architecture (default: ``space.flops(arch)`` at the space's image size).
    history_path: a ``history.jsonl`` to append every evaluated candidate to (when ``write_history``), and to
    resume from unless ``cached`` (the records of an earlier run) is given.
    Raises InfeasibleWindowError when no architecture is found in the window after ``max_tries`` draws.
    """
    _check_options(population, iterations, parents, mutations, crossovers, window)
    if score is None:
        if fitness is None:
            raise ValueError("evolutionary_search needs fitness(arch) or score(archs)")
        score = lambda archs: [fitness(a) for a in archs]  # noqa: E731
    high = float(flops_budget)
    draws = _Window(space, flops or space.flops, window * high, high, max_tries)
    known = {arch_key(r["arch"]): r for r in cached} if cached is not None else load_history(history_path)
    result = SearchResult(budget=int(high), window=(draws.low, high))
    total = population + iterations * (mutations + crossovers)
    with _Recorder(history_path if write_history else None, total, progress) as recorder:
        for iteration in range(iterations + 1):
            drawn, exhausted = _draw_iteration(space, draws, iteration, _rng(seed, iteration), result.history,
                                               population, parents, mutations, crossovers, p_mutate)
            if not drawn and not result.history:
                raise draws.infeasible()
            new = [(origin, arch) for origin, arch in drawn if arch_key(arch) not in known]
            scores = iter([float(f) for f in score([arch for _, arch in new])] if new else [])
            for origin, arch in drawn:
                key = arch_key(arch)
                record = known.get(key) or {"iteration": iteration, "origin": origin, "arch": arch,
                                            "flops": draws.flops_of[key], "fitness": next(scores)}
                result.history.append(record)
                recorder.add(record, new=key not in known, best=result.best["fitness"])
            if exhausted:
                break  # the window (or the parents' neighbourhood) is exhausted
    return result


def _draw_iteration(space: SearchSpace, draws: _Window, iteration: int, rng: random.Random,
                    history: list[dict[str, Any]], population: int, parents: int, mutations: int,
                    crossovers: int, p_mutate: float) -> tuple[list[tuple[str, dict]], bool]:
    """The (origin, arch) candidates of ``iteration`` in draw order, and whether the window ran out."""
    drawn = []
    for origin, make in _makers(space, iteration, rng, history, population, parents, mutations, crossovers,
                                p_mutate):
        arch = draws.draw(make)
        if arch is None:
            return drawn, True
        drawn.append((origin, arch))
    return drawn, False


def random_search(space: SearchSpace, fitness: Callable[[dict[str, Any]], float], flops_budget: float,
                  evaluations: int, seed: int = 0, window: float = 0.975,
                  flops: Callable[[dict[str, Any]], int] | None = None, max_tries: int = 20_000) -> SearchResult:
    """``evaluations`` distinct random architectures from the FLOPs window (the baseline of evolution)."""
    return evolutionary_search(space, fitness, flops_budget, seed=seed, population=evaluations, iterations=0,
                               window=window, flops=flops, max_tries=max_tries)


def load_history(path: str | Path | None) -> dict[str, dict[str, Any]]:
    """The records of a ``history.jsonl`` by architecture key ({} when there is none)."""
    if path is None or not Path(path).exists():
        return {}
    records = {}
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:{number} is not a JSON line ({err}); delete the broken line to resume") from err
        records[arch_key(record["arch"])] = record
    return records
