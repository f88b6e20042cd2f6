"""Validation cases: each is one ``nspsim_runtime.train`` configuration at N ranks, and the built-in suites.

A case's keys are ``nspsim_runtime.train`` options (``planner``, ``trace``, ``model``, ``tokens_per_batch``,
``max_context``, ``backend``, ``lookahead``, ``recompute``, ``seed``, ``steps``, ``token_budget``,
``start_batch``) plus ``ranks`` and an optional ``label``; ``--cases FILE`` reads a JSON list of them.

The default suite spreads over what the simulator must get right: Static SP at every degree, FlexSP,
BASP, NSP-2L and NSP; Ulysses and Ring; phase streaming on (``--lookahead all``) and off (``0``); a plan
with several micro-batches (a token budget below the batch's per-rank tokens); one that recomputes
(``--recompute all``); 2 and 4 ranks; heavy-tailed ``code`` batches (one long sample next to many
short ones), on which the strategies differ by 20% or more so that their order is decidable. The
held-out suite uses other traces, seeds and sizes. Trade-off: each case is a real multi-process run
(~20-40 s on 2 cores), so the suites are small; more steps per case tighten the standard errors.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from nspsim.jsonfile import read_json
from nspsim.specs.backend import BACKENDS, SPBackend
from nspsim.units import parse_tokens

WARMUP_STEPS = 1
"""Steps left out of every case's statistics (the first step pays thread and allocator start-up)."""


@dataclass(frozen=True, kw_only=True)
class Case:
    """One ``nspsim_runtime.train`` run to validate (see the module docstring)."""

    ranks: int
    planner: str
    label: str = ""
    trace: str = "code"
    model: str = "tiny"
    tokens_per_batch: int = 12 * 1024
    max_context: int = 8 * 1024
    backend: str = SPBackend.ULYSSES
    lookahead: str = "all"
    recompute: str = "plan"
    seed: int = 1
    steps: int = 4
    token_budget: int | None = None
    start_batch: int = 0

    def __post_init__(self) -> None:
        for key in ("planner", "label", "trace", "model", "backend", "lookahead", "recompute"):
            value = getattr(self, key)
            if not isinstance(value, str):
                raise ValueError(f"a case's {key} must be text, got {value!r}")
        if not isinstance(self.ranks, int) or isinstance(self.ranks, bool) or self.ranks < 1 or self.ranks > 8:
            raise ValueError(f"case {self.name}: ranks must be an integer from 1 to 8, got {self.ranks!r}")
        if self.ranks & (self.ranks - 1):
            raise ValueError(f"case {self.name}: ranks must be a power of two, got {self.ranks}")
        if not isinstance(self.steps, int) or self.steps <= WARMUP_STEPS + 1:
            raise ValueError(
                f"case {self.name}: steps must be an integer above {WARMUP_STEPS + 1} ({WARMUP_STEPS} warm-up step "
                f"is left out, and a standard deviation needs two more), got {self.steps!r}"
            )
        if self.backend not in BACKENDS:
            raise ValueError(f"case {self.name}: backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        if self.recompute not in ("plan", "all", "none"):
            raise ValueError(f"case {self.name}: recompute must be plan, all or none, got {self.recompute!r}")
        if not isinstance(self.planner, str) or not self.planner:
            raise ValueError(f"case {self.name}: planner must be a planner spec such as nsp or static:degree=2")

    @property
    def name(self) -> str:
        """The label, or one made from the planner, backend, options and ranks."""
        if self.label:
            return self.label
        extra = [self.trace] if self.trace != "code" else []
        extra += [self.backend] if self.backend != BACKENDS[0] else []
        extra += [f"lookahead={self.lookahead}"] if self.lookahead != "all" else []
        extra += [f"recompute={self.recompute}"] if self.recompute != "plan" else []
        extra += [f"budget={self.token_budget}"] if self.token_budget else []
        return " ".join([self.planner, *extra, f"@{self.ranks}"])

    @property
    def batches(self) -> tuple[Any, ...]:
        """What identifies the batches a case runs (cases with equal keys ran the same batches)."""
        return (
            self.trace,
            self.model,
            self.tokens_per_batch,
            self.max_context,
            self.seed,
            self.start_batch,
            self.steps,
            self.ranks,
        )

    def train_args(self) -> list[str]:
        """The ``nspsim_runtime.train`` options of this case (without ``--profile`` and ``--records``); plans run
        as routed (``--prepare none``), as every recorded validation ran them."""
        out = [
            "--planner", self.planner, "--trace", self.trace, "--model", self.model,
            "--tokens-per-batch", str(self.tokens_per_batch), "--max-context", str(self.max_context),
            "--backend", self.backend, "--lookahead", self.lookahead, "--recompute", self.recompute,
            "--seed", str(self.seed), "--steps", str(self.steps), "--start-batch", str(self.start_batch),
            "--plan-ahead", "all", "--prepare", "none",
        ]  # fmt: skip
        if self.token_budget is not None:
            out += ["--token-budget", str(self.token_budget)]
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields."""
        return asdict(self)


def default_suite(ranks: tuple[int, ...]) -> list[Case]:
    """The built-in suite at each of ``ranks`` (module docstring)."""
    out: list[Case] = []
    for n in ranks:
        degree = 1
        while degree <= n:
            out.append(Case(ranks=n, planner=f"static:degree={degree}"))
            degree *= 2
        out += [Case(ranks=n, planner=p) for p in ("flexsp", "basp", "nsp2l", "nsp")]
        out += [
            Case(ranks=n, planner="nsp", backend="ring"),
            Case(ranks=n, planner="nsp", lookahead="0"),
            Case(ranks=n, planner=f"static:degree={n}", token_budget=4096),
            Case(ranks=n, planner="nsp", recompute="all"),
        ]
    return out


def held_out_suite(ranks: tuple[int, ...]) -> list[Case]:
    """Cases on other traces, seeds and sizes than :func:`default_suite` (a check against overfitting
    the model to the built-in cases)."""
    out: list[Case] = []
    for n in ranks:
        wiki: dict[str, Any] = {"trace": "wikipedia", "seed": 7, "tokens_per_batch": 16 * 1024, "max_context": 8 * 1024}
        crawl: dict[str, Any] = {
            "trace": "commoncrawl",
            "seed": 3,
            "tokens_per_batch": 8 * 1024,
            "max_context": 6 * 1024,
        }
        out += [Case(ranks=n, planner=p, **wiki) for p in ("static:degree=1", f"static:degree={n}", "nsp", "flexsp")]
        out += [Case(ranks=n, planner=p, **crawl) for p in ("static:degree=1", "nsp", "basp")]
    return out


SUITES = {"default": default_suite, "held-out": held_out_suite}


def load_cases(path: str) -> list[Case]:
    """Cases from a JSON list of objects (keys: :class:`Case` fields; sizes may be written ``"16k"``)."""
    data = read_json(Path(path), "cases")
    if not isinstance(data, list) or not data or not all(isinstance(c, dict) for c in data):
        raise ValueError(f"{path}: cases must be a non-empty JSON list of objects")
    known = {f.name for f in fields(Case)}
    out = []
    for i, raw in enumerate(data):
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ValueError(f"{path}: case {i}: unknown keys {unknown} (known: {', '.join(sorted(known))})")
        if "ranks" not in raw or "planner" not in raw:
            raise ValueError(f'{path}: case {i}: needs at least "ranks" and "planner"')
        values = dict(raw)
        for key in ("tokens_per_batch", "max_context", "token_budget"):
            if isinstance(values.get(key), str):
                values[key] = parse_tokens(values[key])
        if "lookahead" in values:
            values["lookahead"] = str(values["lookahead"])
        try:
            out.append(Case(**values))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{path}: case {i}: {exc}") from None
    return out


def dump_cases(cases: list[Case]) -> str:
    """The cases as ``--cases`` reads them."""
    return json.dumps([c.to_dict() for c in cases], indent=1)
