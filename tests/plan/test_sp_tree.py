"""SP tree: exact small cases and hypothesis properties over random forests."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nspsim.sp_tree import Node, SPTree, is_power_of_two


@st.composite
def trees(draw: st.DrawFn) -> SPTree:
    p = draw(st.integers(0, 9).map(lambda k: 2**k))
    spmax = draw(st.integers(0, p.bit_length() - 1).map(lambda k: 2**k))
    return SPTree(num_gpus=p, spmax=spmax)


def test_paper_figure_4_chain_of_gpu5() -> None:
    tree = SPTree(num_gpus=8, spmax=8)
    assert tree.chain(5) == (Node(1, 5), Node(2, 2), Node(4, 1), Node(8, 0))
    assert [list(n.ranks) for n in tree.chain(5)] == [[5], [4, 5], [4, 5, 6, 7], list(range(8))]
    assert tree.degrees == (8, 4, 2, 1)
    assert tree.node_depth(Node(2, 2)) == 2
    assert tree.num_nodes() == 15


def test_forest_when_p_exceeds_spmax() -> None:
    tree = SPTree(num_gpus=64, spmax=32)
    assert tree.num_trees == 2
    assert tree.chain(40)[-1] == Node(32, 1)
    assert tree.tree_of(Node(4, 9)) == 1
    assert tree.parent(Node(32, 1)) is None
    assert tree.num_nodes() == 2 * 63


def test_parent_children_ancestors_descendants() -> None:
    tree = SPTree(num_gpus=8, spmax=8)
    assert tree.children(Node(4, 1)) == (Node(2, 2), Node(2, 3))
    assert tree.children(Node(1, 3)) == ()
    assert tree.ancestors(Node(1, 6)) == (Node(2, 3), Node(4, 1), Node(8, 0))
    assert tree.descendants(Node(4, 1)) == (Node(2, 2), Node(2, 3), Node(1, 4), Node(1, 5), Node(1, 6), Node(1, 7))


def test_antichain_examples() -> None:
    tree = SPTree(num_gpus=8, spmax=8)
    assert tree.is_antichain([Node(4, 0), Node(2, 2), Node(1, 6), Node(1, 7)])
    assert not tree.is_antichain([Node(4, 0), Node(2, 1)])
    assert tree.is_antichain([Node(2, 1), Node(2, 1)])  # a node used twice is still one group


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"num_gpus": 6, "spmax": 4}, "power of two <= 2"),
        ({"num_gpus": 8, "spmax": 16}, "spmax"),
        ({"num_gpus": 8, "spmax": 3}, "spmax"),
    ],
)
def test_invalid_trees(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SPTree(**kwargs)


def test_check_node_and_parse() -> None:
    tree = SPTree(num_gpus=8, spmax=4)
    with pytest.raises(ValueError, match="not in the SP tree"):
        tree.check_node(Node(8, 0))
    with pytest.raises(ValueError, match="not in the SP tree"):
        tree.check_node(Node(2, 4))
    assert Node.parse("sp4#1") == Node(4, 1)
    with pytest.raises(ValueError, match="malformed"):
        Node.parse("4-1")


@given(trees())
def test_nodes_of_one_depth_tile_the_ranks(tree: SPTree) -> None:
    for degree in tree.degrees:
        ranks = [r for node in tree.nodes(degree) for r in node.ranks]
        assert ranks == list(range(tree.num_gpus))


@given(trees(), st.data())
def test_any_two_nodes_nested_or_disjoint(tree: SPTree, data: st.DataObject) -> None:
    nodes = list(tree.nodes())
    a = data.draw(st.sampled_from(nodes))
    b = data.draw(st.sampled_from(nodes))
    ra, rb = set(a.ranks), set(b.ranks)
    assert ra <= rb or rb <= ra or not (ra & rb)
    assert a.overlaps(b) == bool(ra & rb)
    assert a.contains(b) == (rb <= ra)


@given(trees(), st.data())
def test_chain_is_every_node_holding_the_rank(tree: SPTree, data: st.DataObject) -> None:
    rank = data.draw(st.integers(0, tree.num_gpus - 1))
    chain = tree.chain(rank)
    assert len(chain) == tree.depth + 1
    assert set(chain) == {n for n in tree.nodes() if n.contains_rank(rank)}
    assert all(tree.parent(lo) == hi for lo, hi in zip(chain, chain[1:]))


@given(trees(), st.data())
def test_antichain_detection_matches_pairwise_definition(tree: SPTree, data: st.DataObject) -> None:
    nodes = data.draw(st.lists(st.sampled_from(list(tree.nodes())), max_size=8))
    distinct = set(nodes)
    pairwise = all(not a.overlaps(b) for a in distinct for b in distinct if a != b)
    assert tree.is_antichain(nodes) == pairwise


@given(trees(), st.data())
def test_per_gpu_sum_matches_loop(tree: SPTree, data: st.DataObject) -> None:
    import numpy as np

    nodes = data.draw(st.lists(st.sampled_from(list(tree.nodes())), min_size=1, max_size=12))
    values = np.arange(1, len(nodes) + 1, dtype=float)
    degrees, firsts = tree.node_arrays(nodes)
    expected = np.zeros(tree.num_gpus)
    for v, n in zip(values, nodes):
        expected[list(n.ranks)] += v
    assert np.allclose(tree.per_gpu_sum(values, degrees, firsts), expected)


def test_is_power_of_two() -> None:
    assert [n for n in range(-2, 70) if is_power_of_two(n)] == [1, 2, 4, 8, 16, 32, 64]
