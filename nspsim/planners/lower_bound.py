"""A lower bound on the proxy Load of any plan of a batch (every planner reports Load / bound).

Load = max_p D_fwd + max_p D_bwd >= max_p C_p, with C_p = D_fwd + D_bwd. Two floors:

* **work floor** - the mean of C_p. Placing sample j on a node of degree d adds c_j(d) to d GPUs,
  and d * c_j(d) >= c_j(1): attention compute is conserved across degrees (FLOPs / d on each of d
  GPUs at the same per-length throughput; Ring's smaller blocks only lower it), communication is
  >= 0, and non-attention work is linear in tokens. So mean C_p >= sum_j c_j(1) / P: all work
  spread perfectly with zero communication.
* **longest-sample floor** - the GPUs of the longest sample's node carry at least its own cost at
  that degree, its node latency and the non-attention intercept, minimised over the degrees that
  hold it in memory (L / d <= B_tok: the memory floor) - rather than only spmax, since
  communication can make spmax the costliest choice.

Micro-batched plans sum per-micro-batch Loads, and both floors still hold for the sum. The bound
ignores how samples pack (integrality), so Load / bound - 1 overstates a plan's true gap.
"""

from __future__ import annotations

from nspsim.planners.proxy import CostTable


def work_floor(table: CostTable) -> float:
    """sum_j c_j(1) / P: perfectly balanced work without communication."""
    return float(table.total(1).sum()) / table.tree.num_gpus


def longest_sample_floor(table: CostTable) -> float:
    """Cheapest memory-feasible degree of the longest sample: its own per-GPU cost."""
    longest = int(table.lengths[0])
    fitting = [d for d in table.tree.degrees if longest <= d * table.token_budget] or [table.tree.spmax]
    icpt = sum(table.intercept)
    return min(float(table.total(d)[0]) + table.overhead_total(d) for d in fitting) + icpt


def lower_bound(table: CostTable) -> float:
    """max(work floor, longest-sample floor), in seconds, for the table's proxy."""
    return max(work_floor(table), longest_sample_floor(table))
