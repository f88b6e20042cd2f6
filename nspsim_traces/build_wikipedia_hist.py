"""Derive ``nspsim_traces/data/wikipedia_hist.json`` from the FlexSP artifact's ``wikipedia.txt``.

Usage (from the repository root)::

    python -m traces.build_wikipedia_hist [--input PATH] [--output PATH] [--check]

The input defaults to ``$NSPSIM_SHARED/traces/wikipedia.txt``, else ``../shared/traces/wikipedia.txt``
relative to the repository root. The script refuses any file whose SHA-1 is not the artifact's.
``nspsim.trace.fit_histogram`` bins the lengths on 8 log-spaced bins per octave and fits a power law
inside each bin. The output also records the file's statistics (``nspsim.trace.stats``). The script
has no randomness, so reruns give the same JSON. ``--check`` compares the result with the existing
output instead of writing it, and exits 1 if they differ.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from nspsim.trace import HISTOGRAM_FORMAT, WIKIPEDIA_SOURCE, fit_histogram
from nspsim.trace.stats import trace_stats

REPO_ROOT = Path(__file__).resolve().parent.parent
OUTPUT = REPO_ROOT / "nspsim_traces" / "data" / "wikipedia_hist.json"
BINS_PER_OCTAVE = 8
EXPECTED_SHA1 = "cb8af4debbaf03fce56deea87aa44d2dc4b498eb"
PROVENANCE = {
    "artifact": "FlexSP (ASPLOS'25, arXiv 2412.01523)",
    "repository": "https://github.com/PKU-DAIR/Hetu-Galvatron",
    "branch": "flexsp",
    "commit": "b4666892601f1adab345dbf07b6af2c300eb7c90",
    "path": "galvatron/datasets/wikipedia.txt",
    "git_blob": "a1aea49f7872f50a1e7a8325d723d3b91a53c5e5",
    "sha1": EXPECTED_SHA1,
    "license": "Apache-2.0",
    "note": "derived facts only (bin counts, fitted within-bin exponents, summary statistics); "
    "the 1,000,000 raw lengths are not redistributed",
}
METHOD = (
    "Bins [edges[i], edges[i+1]) on round(2**(k/8)) (deduplicated; every power of two is an edge). "
    "The last edge is max+1. Inside bin i the length is floor(X), where X has density x**alpha[i] on the bin. "
    "alpha is solved so that E[log floor X] equals the bin's mean log-length. Bins with fewer than 10 "
    "samples share the pooled Pareto MLE tail exponent. Single-integer bins have alpha 0."
)


def default_input() -> Path:
    """``$NSPSIM_SHARED/traces/wikipedia.txt`` if the variable is set, else ``<repo>/../shared/...``."""
    shared = os.environ.get("NSPSIM_SHARED")
    base = Path(shared) if shared else REPO_ROOT.parent / "shared"
    return base / "traces" / "wikipedia.txt"


def build(path: Path) -> dict[str, Any]:
    """The histogram JSON object for the artifact file at ``path`` (checks its SHA-1 first)."""
    raw = path.read_bytes()
    digest = hashlib.sha1(raw).hexdigest()
    if digest != EXPECTED_SHA1:
        raise ValueError(f"{path}: sha1 {digest} is not the FlexSP wikipedia.txt ({EXPECTED_SHA1})")
    lengths = np.loadtxt(path, dtype=np.int64, ndmin=1)
    edges, counts, alpha = fit_histogram(lengths, bins_per_octave=BINS_PER_OCTAVE)
    return {
        "format": HISTOGRAM_FORMAT,
        "name": "wikipedia",
        "source": WIKIPEDIA_SOURCE,
        "provenance": PROVENANCE,
        "method": METHOD,
        "bins_per_octave": BINS_PER_OCTAVE,
        "reference_stats": trace_stats(lengths).to_dict(),
        "edges": list(edges),
        "counts": list(counts),
        "alpha": list(alpha),
    }


def dumps(obj: dict[str, Any]) -> str:
    """Indented JSON with each number list on one line (a small, diff-friendly file)."""
    text = json.dumps(obj, indent=2)
    for key in ("edges", "counts", "alpha"):
        start = text.index(f'"{key}": [')
        stop = text.index("]", start) + 1
        text = text[:start] + f'"{key}": ' + json.dumps(obj[key]) + text[stop:]
    return text + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", type=Path, default=None, help="path to wikipedia.txt")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    parser.add_argument("--check", action="store_true", help="compare with --output instead of writing")
    args = parser.parse_args(argv)
    source = args.input or default_input()
    if not source.exists():
        print(f"input not found: {source} (set NSPSIM_SHARED or pass --input)", file=sys.stderr)
        return 2
    text = dumps(build(source))
    if args.check:
        same = args.output.exists() and args.output.read_text(encoding="utf-8") == text
        print(f"{args.output}: {'up to date' if same else 'DIFFERS from a fresh build'}")
        return 0 if same else 1
    args.output.write_text(text, encoding="utf-8")
    print(f"wrote {args.output} ({len(json.loads(text)['counts'])} bins)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
