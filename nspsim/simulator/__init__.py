"""Discrete-event simulator of one training step of any plan (docs/simulator.md).

Layers: :mod:`~nspsim.simulator.hardware` (ports, collectives, processor sharing),
:mod:`~nspsim.simulator.work` (phase times from the cost model), :mod:`~nspsim.simulator.step_model`
(the step as per-GPU task queues), :mod:`~nspsim.simulator.engine` (SimPy run and time accounting),
:mod:`~nspsim.execution.activation` (memory, save/recompute, OOM), :mod:`~nspsim.simulator.periodic`
(exact extrapolation of repeated layers), :mod:`~nspsim.simulator.results` and
:mod:`~nspsim.simulator.timeline` (typed results, Chrome-trace export), and the
:class:`~nspsim.simulator.simulator.Simulator` that ties them together. See docs/simulator.md.
"""

from nspsim.simulator.results import StepResult, TimelineEvent
from nspsim.simulator.simulator import SimOptions, Simulator
from nspsim.simulator.timeline import chrome_trace, chrome_trace_json

__all__ = ["SimOptions", "Simulator", "StepResult", "TimelineEvent", "chrome_trace", "chrome_trace_json"]
