"""FlexSP's two variants: the no-plan case, and each stage of ``variant="artifact"`` on hand cases
(the FlexSP artifact's tie rule, count rule, bucketing rule and slot pruning)."""

from __future__ import annotations

import numpy as np
import pytest

from nspsim.planners import get_planner
from nspsim.planners.flexsp.artifact import min_sp_size, slot_limits
from nspsim.planners.flexsp.bucketing import _dp_bounds, bucketize_artifact
from nspsim.planners.flexsp.milp import Limits, MilpProblem, _layout, solve
from nspsim.planners.microbatch import artifact_first_count, blaster_split, blaster_split_artifact
from planner_fixtures import batch_of, check_valid, tiny_workload

NO_PLAN_CASE = [609, 554, 609, 512, 764, 93, 512]  # P = 2, B_tok = 456: the memory minimum (5) cannot hold it


def reference_dp(lengths: list[int], m: int) -> list[tuple[int, int]]:
    """The min-max contiguous partition DP with the artifact's tie rule: for each (i, k) keep the
    smallest split j reaching the optimum (strict improvement only), then walk back from (n, m)."""
    n, inf = len(lengths), float("inf")
    prefix = np.concatenate([[0], np.cumsum(lengths)]).tolist()
    dp = [[inf] * (m + 1) for _ in range(n + 1)]
    split = [[0] * (m + 1) for _ in range(n + 1)]
    dp[0][0] = 0
    for k in range(1, m + 1):
        for i in range(1, n + 1):
            for j in range(k - 1, i):
                value = max(dp[j][k - 1], prefix[i] - prefix[j])
                if value < dp[i][k]:
                    dp[i][k], split[i][k] = value, j
    chunks, end = [], n
    for k in range(m, 0, -1):
        chunks.append((split[end][k], end))
        end = split[end][k]
    return chunks[::-1]


def as_lists(lengths: np.ndarray, chunks: list[np.ndarray]) -> list[list[int]]:
    return [lengths[c].tolist() for c in chunks]


def test_the_no_plan_case_plans_in_both_variants() -> None:
    wl = tiny_workload(gpus=2, token_budget=456)
    ours = get_planner("flexsp").plan(batch_of(NO_PLAN_CASE), wl)
    check_valid(ours, wl, NO_PLAN_CASE)
    assert ours.metadata["flexsp_counts"] == "5-6"  # 5 holds nothing, 6 plans, the sweep stops there
    artifact = get_planner("flexsp", variant="artifact").plan(batch_of(NO_PLAN_CASE), wl)
    check_valid(artifact, wl, NO_PLAN_CASE)
    assert artifact.metadata["flexsp_counts"] == "6-7"  # its first valid count, then to one sample per chunk


def test_artifact_tie_rule_makes_the_last_chunks_longest() -> None:
    lengths = np.array([10, 1, 1, 1, 1])
    assert as_lists(lengths, blaster_split_artifact(lengths, 3)) == [[10], [1], [1, 1, 1]]
    assert as_lists(lengths, blaster_split(lengths, 3)) == [[10], [1, 1, 1], [1]]


def test_artifact_split_equals_the_reference_dp() -> None:
    rng = np.random.default_rng(7)
    for _ in range(400):
        n = int(rng.integers(1, 12))
        lengths = np.sort(rng.integers(1, int(rng.choice([3, 20, 1000])), n))[::-1].astype(np.int64)
        m = int(rng.integers(1, n + 1))
        got = [(int(c[0]), int(c[-1]) + 1) for c in blaster_split_artifact(lengths, m)]
        assert got == reference_dp(lengths.tolist(), m), (lengths.tolist(), m)
        ours = blaster_split(lengths, m)
        assert max(int(lengths[c].sum()) for c in ours) == max(int(lengths[a:b].sum()) for a, b in got)


def test_artifact_first_count_needs_every_chunk_strictly_below_capacity() -> None:
    lengths = np.array(sorted(NO_PLAN_CASE, reverse=True))
    assert artifact_first_count(lengths, 2 * 456) == 6  # 5 chunks: [512, 512, 93] = 1,117 > 912
    assert artifact_first_count(np.array([5, 5]), 10) == 2  # one chunk of exactly P B_tok is not enough
    assert artifact_first_count(np.array([5, 4]), 10) == 1
    with pytest.raises(ValueError, match="not below"):
        artifact_first_count(np.array([10, 1]), 10)


def test_artifact_bucketing_adds_one_bucket_while_padding_exceeds_half_the_free_capacity() -> None:
    lengths = np.array([1, 2, 3, 10])  # tokens 16
    one, count = bucketize_artifact(lengths, capacity=64, start=1)  # padded 40 <= (16 + 64) / 2
    assert count == 1 and one.maxima.tolist() == [10]
    two, count = bucketize_artifact(lengths, capacity=60, start=1)  # 40 > 38: two buckets, padded 19
    assert count == 2 and two.maxima.tolist() == [3, 10] and two.padding == 3
    _, count = bucketize_artifact(lengths, capacity=60)  # min(n, 16) = n buckets: one per sequence
    assert count == 4


def test_artifact_bucket_count_equals_the_one_at_a_time_loop() -> None:
    rng = np.random.default_rng(3)
    for _ in range(100):
        lengths = rng.integers(1, int(rng.choice([10, 100, 5000])), int(rng.integers(17, 90)))
        capacity = float(lengths.sum()) * float(rng.uniform(1.001, 1.5))
        values, counts = np.unique(lengths, return_counts=True)
        want = 16
        while want < values.size:
            maxima = values[_dp_bounds(values, counts, want)]
            if maxima[np.searchsorted(maxima, lengths)].sum() <= (lengths.sum() + capacity) / 2:
                break
            want += 1
        buckets, count = bucketize_artifact(lengths, capacity)
        assert count == want or (want >= values.size and count in (want, lengths.size))
        assert np.all(buckets.maxima[buckets.of_sample] >= lengths)


def test_artifact_slot_pruning_on_the_reported_case() -> None:
    lengths = np.array([2500] * 3 + [200] * 40)  # 16 GPUs, B_tok 1,000: three sequences need SP 4
    assert min_sp_size(np.array([200, 1000, 1001, 2500, 4001]), 1000).tolist() == [1, 1, 2, 4, 8]
    assert slot_limits(lengths, (2, 4, 8, 16), 16, 1000.0) == {2: 2}  # (16 - 3 x 4) / 2


def test_slot_pruning_can_cut_off_the_optimum() -> None:
    """Three long sequences share an 8-GPU group so four 2-GPU groups can take the short ones; the
    artifact's pruning leaves two 2-GPU slots and the best it can reach is slower."""
    sizes = (2, 4, 8, 16)
    problem = MilpProblem(
        counts=np.array([40, 3]),
        lengths=np.array([20, 250]),
        time={
            2: np.array([10.0, 1e9]),
            4: np.array([10.0, 60.0]),
            8: np.array([10.0, 35.0]),
            16: np.array([10.0, 20.0]),
        },
        latency=dict.fromkeys(sizes, 0.0),
        sizes=sizes,
        num_gpus=16,
        token_budget=100.0,
    )
    pruned = MilpProblem(
        **{**problem.__dict__, "slot_limit": slot_limits(np.array([20] * 40 + [250] * 3), sizes, 16, 100.0)}
    )
    assert (
        np.count_nonzero(_layout(pruned).slot_size == 2) == 2 and np.count_nonzero(_layout(problem).slot_size == 2) == 8
    )
    limits = Limits(time_limit=60.0, work_limit=10**5, mip_gap=0.0)
    free, cut = solve(problem, limits=limits).solution, solve(pruned, limits=limits).solution
    assert free is not None and cut is not None
    assert free.makespan == pytest.approx(105.0)  # 3 x 35 on one 8-group; 10 shorts on each of four 2-groups
    assert cut.makespan > free.makespan + 5


def test_artifact_variant_plans_a_trace_batch_and_says_what_it_did() -> None:
    wl = tiny_workload(gpus=8, token_budget=4096)
    rng = np.random.default_rng(5)
    lengths = rng.integers(64, 12000, 40).tolist()
    plan = get_planner("flexsp", variant="artifact").plan(batch_of(lengths), wl)
    check_valid(plan, wl, lengths)
    first, last = (int(x) for x in str(plan.metadata["flexsp_counts"]).split("-"))
    assert last - first == 4 and plan.metadata["flexsp_variant"] == "artifact"
    assert len(str(plan.metadata["flexsp_buckets"]).split(",")) == len(set(plan.arrays[3].tolist()))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"variant": "galvatron"}, "variant must be one of nspsim, artifact"),
        ({"variant": "artifact", "max_micro_batches": 8}, "does not apply to variant=artifact"),
        ({"count_window": 0}, "count_window"),
    ],
)
def test_variant_options_are_checked(options: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        get_planner("flexsp", **options)
