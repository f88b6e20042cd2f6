"""Causal sliding-window attention as part of the model: the pair count (hand-computed and brute force),
the spec's window and its fingerprint, windowed attention cost on Ulysses and local nodes, ring refused
with the runtime's line, windows read from transformers configs, and Mistral-7B with and without its
window through ``nspsim compare`` and ``plan``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nspsim.cost.analytic import AnalyticCostModel
from nspsim.plan.refs import ModelRef, model_fingerprint
from nspsim.specs.backend import window_refusal
from nspsim.specs.clusters import get_cluster
from nspsim.specs.hf import resolve_model, spec_from_hf_config
from nspsim.specs.model import ModelSpec, causal_pairs, get_model, tiny, window_share
from nspsim.specs.training import TrainingSpec

MISTRAL_7B = {"model_type": "mistral"}
"""transformers' ``MistralConfig`` defaults are Mistral-7B-v0.1's shapes (32 layers, hidden 4096, 32 heads,
8 KV heads, FFN 14336, vocabulary 32000) and its 4,096-token window (mistralai/Mistral-7B-v0.1 model
card); ``nspsim.specs.hf_defaults`` holds them."""


@pytest.mark.parametrize(
    ("length", "window", "pairs"),
    [
        (5, 2, 1 + 2 + 2 + 2 + 2),
        (5, 1, 5),
        (5, 5, 15),
        (5, 6, 15),
        (5, None, 15),
        (1, 1, 1),
        (0, 3, 0),
        (8, 3, 1 + 2 + 3 * 6),
    ],
)
def test_pairs_are_hand_counted(length: int, window: int | None, pairs: int) -> None:
    assert float(causal_pairs(length, window)) == pairs


@given(st.integers(0, 300), st.integers(1, 400))
def test_pairs_are_the_brute_force_count(length: int, window: int) -> None:
    brute = sum(min(i + 1, window) for i in range(length))
    assert float(causal_pairs(length, window)) == brute
    assert float(causal_pairs(length, None)) == length * (length + 1) // 2


def test_a_window_at_least_the_length_is_full_attention() -> None:
    lengths = np.array([1, 7, 4096, 4096, 100_000])
    share = window_share(lengths, 100_000)
    assert share.tolist() == [1.0] * 5
    assert window_share([5], 2).tolist() == [9 / 15]


def test_attention_squared_lengths_scale_by_the_share_averaged_over_layers() -> None:
    lengths = np.array([5, 1, 2])
    plain = tiny()
    assert plain.attention_sq_lengths(lengths).tolist() == [25.0, 1.0, 4.0]
    every = ModelSpec(**{**plain.record(), "sliding_window": 2})
    assert every.attention_sq_lengths(lengths).tolist() == [25.0 * 9 / 15, 1.0, 4.0]
    wide = ModelSpec(**{**plain.record(), "sliding_window": 5})
    assert wide.attention_sq_lengths(lengths).tolist() == [25.0, 1.0, 4.0]
    half = ModelSpec(**{**plain.record(), "sliding_window": 2, "window_layers": (1,)})  # 1 of 2 layers
    assert half.attention_sq_lengths(lengths)[0] == pytest.approx(25.0 * (9 / 15 + 1) / 2, rel=1e-15)


PINNED_FINGERPRINTS = {
    "qwen3-30b-a3b": "713ee4e49da17cd5",
    "qwen3-235b-a22b": "046af11cdc16ae09",
    "tiny": "133e22baae634e26",
    "tiny-moe": "d8319caa09108df5",
    "hf-qwen3-tiny": "e0a025a95c1ffd34",
    "hf-qwen3-moe-tiny": "a16f8e7d74cc3b5d",
}
"""Model fingerprints before windows existed (commit be77d8a): a model without a window keeps them, so
its plan hashes and recorded specs do too."""


@pytest.mark.parametrize(("name", "fingerprint"), PINNED_FINGERPRINTS.items())
def test_a_model_without_a_window_keeps_its_fingerprint(name: str, fingerprint: str) -> None:
    model = resolve_model(name)
    assert model_fingerprint(model) == fingerprint
    assert "sliding_window" not in model.record() and "window_layers" not in model.record()
    windowed = ModelSpec(**{**model.record(), "sliding_window": 4096})
    assert model_fingerprint(windowed) != fingerprint
    ref = ModelRef.of(windowed)
    assert ref.spec is not None and ref.spec["sliding_window"] == 4096


def test_every_layer_listed_is_one_spelling() -> None:
    base = tiny().record()
    listed = ModelSpec(**{**base, "sliding_window": 8, "window_layers": (0, 1)})
    assert listed.window_layers is None and listed == ModelSpec(**{**base, "sliding_window": 8})
    assert model_fingerprint(listed) == model_fingerprint(ModelSpec(**{**base, "sliding_window": 8}))
    some = ModelSpec(**{**base, "sliding_window": 8, "window_layers": (1,)})
    assert some.record()["window_layers"] == [1] and some.windowed_layers == 1
    assert ModelSpec(**some.record()) == some  # what a plan records builds the same spec


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"sliding_window": 0}, "sliding_window must be a token count from 1"),
        ({"sliding_window": -4}, "sliding_window must be a token count from 1"),
        ({"sliding_window": 1.5}, "sliding_window must be a token count from 1"),
        ({"sliding_window": True}, "sliding_window must be a token count from 1"),
        ({"sliding_window": "4096"}, "sliding_window must be a token count from 1"),
        ({"sliding_window": 2**36 + 1}, "sliding_window must be a token count from 1 to 68,719,476,736"),
        ({"sliding_window": 10**400}, "got a 401-character value"),
        ({"window_layers": (0,)}, "window_layers needs a sliding_window"),
        ({"sliding_window": 8, "window_layers": (2,)}, "distinct ascending indices of its 2 layers"),
        ({"sliding_window": 8, "window_layers": (1, 0)}, "distinct ascending indices"),
        ({"sliding_window": 8, "window_layers": ()}, "distinct ascending indices"),
        ({"sliding_window": 8, "window_layers": "0"}, "must be a list of layer indices"),
        ({"sliding_window": 8, "window_layers": (0.0,)}, "must be a list of layer indices"),
    ],
)
def test_a_bad_window_is_one_line(fields: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message) as err:
        ModelSpec(**{**tiny().record(), **fields})
    assert "\n" not in str(err.value)


def _cost(model: ModelSpec, backend: str = "ulysses") -> AnalyticCostModel:
    return AnalyticCostModel(model=model, cluster=get_cluster("h100", 8), training=TrainingSpec(backend=backend))


def test_a_window_makes_long_samples_cheaper_on_ulysses_and_local_nodes() -> None:
    full = spec_from_hf_config({**MISTRAL_7B, "sliding_window": None}, name="m")
    windowed = spec_from_hf_config(MISTRAL_7B, name="m")
    assert windowed.sliding_window == 4096 and windowed.window_layers is None
    short, long = np.array([4096, 1000]), np.array([65_536])
    for degree in (1, 2, 8):
        assert _cost(windowed).attention(short, degree) == _cost(full).attention(short, degree)
        a, b = _cost(windowed).attention(long, degree), _cost(full).attention(long, degree)
        share = float(window_share(long, 4096)[0])
        assert a.fwd.compute == pytest.approx(b.fwd.compute * share, rel=1e-12)
        assert a.bwd.compute == pytest.approx(b.bwd.compute * share, rel=1e-12)
        assert (a.fwd.prologue, a.fwd.epilogue) == (b.fwd.prologue, b.fwd.epilogue)  # same all-to-alls
    assert _cost(windowed).non_attention(1000.0) == _cost(full).non_attention(1000.0)


def test_the_planners_cost_tables_and_lower_bound_see_the_window() -> None:
    """Planners price samples through the cost model (CostTable, the numba kernels' inputs, the lower
    bound): a window lowers long samples' costs, leaves short ones alone."""
    from nspsim.planners.lower_bound import lower_bound
    from nspsim.planners.proxy import CostTable
    from nspsim.sp_tree import SPTree

    tree = SPTree(num_gpus=8, spmax=8, gpus_per_node=8)
    lengths = [65_536, 16_384, 4096, 1000]
    tables = {
        w: CostTable(_cost(spec_from_hf_config({**MISTRAL_7B, "sliding_window": w}, name="m")), tree, lengths, 10**6)
        for w in (4096, None)
    }
    for degree in (1, 4):
        windowed, full = tables[4096].total(degree), tables[None].total(degree)
        assert windowed[0] < full[0] and windowed[1] < full[1]
        assert windowed[2:].tolist() == full[2:].tolist()
    assert lower_bound(tables[4096]) < lower_bound(tables[None])


def test_ring_with_a_window_is_refused_with_the_runtimes_line() -> None:
    line = window_refusal("ring", 4096)
    assert line is not None and "\n" not in line and "use --backend ulysses" in line
    assert window_refusal("ulysses", 4096) is None and window_refusal("ring", None) is None
    with pytest.raises(ValueError, match="the ring backend does not support sliding-window attention"):
        _cost(spec_from_hf_config(MISTRAL_7B, name="m"), "ring")
    _cost(spec_from_hf_config({**MISTRAL_7B, "sliding_window": None}, name="m"), "ring")  # no window: fine


@pytest.mark.parametrize(
    ("config", "window", "layers"),
    [
        ({"model_type": "qwen2_moe", "sliding_window": 0, "use_sliding_window": False}, None, None),  # unused 0
        ({"model_type": "qwen2", "sliding_window": 4096, "use_sliding_window": False}, None, None),
        ({"model_type": "qwen2", "use_sliding_window": True, "max_window_layers": 32}, None, None),  # none from 32
        ({"model_type": "qwen2", "use_sliding_window": True, "max_window_layers": 28}, 4096, (28, 29, 30, 31)),
        ({"model_type": "qwen2", "use_sliding_window": True, "max_window_layers": 0}, 4096, None),
        ({"model_type": "qwen2_moe", "use_sliding_window": True, "sliding_window": 64}, 64, tuple(range(0, 24, 2))),
        ({"model_type": "mistral"}, 4096, None),  # Mistral's default window
        ({"model_type": "mistral", "sliding_window": None}, None, None),
        ({"model_type": "mixtral"}, None, None),
        ({"model_type": "mixtral", "sliding_window": 1024}, 1024, None),
        ({"model_type": "qwen3_moe", "use_sliding_window": True}, 4096, None),
        ({"model_type": "llama", "sliding_window": 1024}, None, None),  # Llama's attention never reads it
    ],
)
def test_windows_are_read_as_transformers_reads_them(
    config: dict, window: int | None, layers: tuple[int, ...] | None
) -> None:
    spec = spec_from_hf_config(config, name="w")
    assert (spec.sliding_window, spec.window_layers) == (window, layers)


@pytest.mark.parametrize(
    ("change", "feature"),
    [
        ({"attention_dropout": 0.1}, "attention dropout (0.1)"),
        ({"attn_logit_softcapping": 30.0}, "attention logit soft-capping"),
        ({"attention_chunk_size": 8192}, "chunked attention (attention_chunk_size)"),
        ({"layer_types": ["chunked_attention"] * 32}, "sliding-window or chunked attention"),
        ({"is_causal": False}, "non-causal (bidirectional) attention"),
    ],
)
def test_what_is_not_modelled_is_refused_with_the_runtimes_phrase(change: dict, feature: str) -> None:
    with pytest.raises(ValueError) as err:
        spec_from_hf_config({**MISTRAL_7B, **change}, name="m")
    text = str(err.value)
    assert "\n" not in text and f"{feature}" in text and "is not modelled" in text
    assert f"'the NSP attention bridge does not support {feature}" in text


def _write(tmp_path: Path, config: dict, name: str) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(config))
    return str(path)


def _mean_step(out: str, planner: str) -> float:
    results = {r["planner"]: r for r in json.loads(out)["results"]}
    value = results[planner]["mean_step_time_s"]
    assert isinstance(value, float)
    return value


def test_mistral_7b_with_its_window_is_predicted_cheaper(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from nspsim.cli.main import main

    windowed = _write(tmp_path, MISTRAL_7B, "mistral.json")
    full = _write(tmp_path, {**MISTRAL_7B, "sliding_window": None}, "mistral-full.json")
    sizes = ["--gpus", "8", "--tokens-per-batch", "256k", "--max-context", "64k", "--iters", "1"]
    steps = {}
    for path in (windowed, full):
        assert main(["compare", "--model", path, *sizes, "--planners", "static,nsp", "--quiet", "--json"]) == 0
        steps[path] = _mean_step(capsys.readouterr().out, "nsp")
    assert steps[windowed] < steps[full]
    plans = {}
    for path in (windowed, full):
        out = str(tmp_path / f"{Path(path).stem}.plan.json")
        assert main(["plan", "--model", path, *sizes[:6], "--planner", "static", "-o", out]) == 0
        plans[path] = json.loads(Path(out).read_text())
    assert plans[windowed]["model"]["spec"]["sliding_window"] == 4096
    assert "sliding_window" not in plans[full]["model"]["spec"]
    capsys.readouterr()
    ring = ["compare", "--model", windowed, *sizes, "--planners", "static", "--quiet", "--backend", "ring"]
    assert main(ring) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "the ring backend does not support sliding-window attention" in err, err


@pytest.mark.parametrize("window", [0, -1, 1.5, "4096", True])
def test_a_bad_window_in_a_config_file_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], window: object
) -> None:
    from nspsim.cli.main import main

    path = _write(tmp_path, {**MISTRAL_7B, "sliding_window": window}, "bad.json")
    args = ["plan", "--model", path, "--gpus", "8", "--tokens-per-batch", "64k", "--max-context", "32k"]
    assert main([*args, "--planner", "static", "-o", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and path in err and "sliding_window" in err, err
    assert not (tmp_path / "p.json").exists()


def test_presets_have_no_window() -> None:
    assert get_model("qwen3-30b-a3b").sliding_window is None
