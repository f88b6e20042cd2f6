"""The speed reference: a short fixed piece of work timed with every rank busy, to tell how fast the
machine is *now* compared with when it was calibrated.

The work is the calibration's own kernel mix (:func:`nspsim_runtime.calibration.mix.kernel_mix`: one
decoder layer's forward and an attention forward) over :data:`REF_TOKENS` tokens of the model being
measured; every rank of the group runs it :data:`REF_REPS` times after one warm-up call, at once
(a barrier first), and the reference is the mean over ranks of each rank's median. Calibration takes
it before, between and after its phases (the profile's ``provenance.speed_reference``); the
validation worker takes it between consecutive blocks of steps, so each block has one just before
and one just after it.

Cost and noise, measured on the 2-core development VM (2026-12-02, no other job, one thread): twelve
references 0.2 s apart spread by 73% (coefficient of variation 12.4%) at 512 tokens, 6.7 ms a call;
41% (11.9%) with 27 calls instead of 9; and 22% (6.1%) at 2,048 tokens, 42 ms a call. Hence
2,048 tokens and 9 calls: ~0.4 s a reference (plus a barrier and a gather). At 512 tokens, in
validation runs whose raw MAPE was 2.9-7.8%, the correction moved the MAPE by -3.0 to +4.0 points;
it paid off only where the machine really moved (raw 22.1%, corrected 9.8%). Trade-off: a longer
reference resolves smaller speed changes but takes a larger share of a run made of ~1-3 s steps.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch.distributed as dist

from nspsim.specs.model import ModelSpec
from nspsim_runtime.calibration.mix import kernel_mix

REF_TOKENS = 2048
"""Tokens of the reference mix (fixed: a calibration and a validation must time the same work)."""
REF_REPS = 9
"""Timed calls per rank per reference (after one warm-up call); each rank's median is kept."""


class SpeedReference:
    """The reference work of one process; :meth:`measure` is collective (every rank of the default
    group calls it at once)."""

    def __init__(self, spec: ModelSpec, kernel: str = "auto") -> None:
        self._mix = kernel_mix(spec, REF_TOKENS, kernel)
        self.samples: list[tuple[float, float]] = []
        """``(unix time, seconds)`` of every reference this process took."""

    def measure(self) -> float:
        """Seconds of the mix (mean over ranks of each rank's median), recorded in :attr:`samples`."""
        world = dist.get_world_size() if dist.is_initialized() else 1
        if world > 1:
            dist.barrier()
        self._mix()
        times = []
        for _ in range(REF_REPS):
            start = time.perf_counter()
            self._mix()
            times.append(time.perf_counter() - start)
        mine = float(np.median(times))
        gathered: list[Any] = [mine]
        if world > 1:
            gathered = [None] * world
            dist.all_gather_object(gathered, mine)
        value = float(np.mean(gathered))
        self.samples.append((time.time(), value))
        return value


def reference_summary(samples: list[tuple[float, float]]) -> dict[str, Any]:
    """The profile's ``provenance.speed_reference``: the work, every sample, their median (what a
    validation compares with) and their spread ``max / min - 1`` (how much the machine moved while
    it was calibrated)."""
    values = [s for _, s in samples]
    return {
        "work": f"calibration kernel mix, {REF_TOKENS} tokens, median of {REF_REPS}, mean over ranks",
        "tokens": REF_TOKENS,
        "reps": REF_REPS,
        "samples": [[round(t, 3), s] for t, s in samples],
        "median_s": float(np.median(values)),
        "drift": max(values) / min(values) - 1.0,
    }
