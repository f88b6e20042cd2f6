"""Hugging Face transformers models under NSP: the attention bridge (:mod:`nspsim_runtime.hf.bridge`) and the
tiny Qwen3 / Qwen3-MoE builders (:mod:`nspsim_runtime.hf.models`).

transformers is an optional dependency (the ``hf`` extra). :func:`require_transformers` is the one
place it is imported: without it, it raises :class:`MissingExtraError` whose one-line message names
the extra to install. The module is returned untyped (``Any``) on purpose: the bridge uses a handful of
its public names, and type-checking transformers' own sources is not this project's to do.
"""

from __future__ import annotations

import importlib
from typing import Any

EXTRA_HINT = "pip install -e '.[hf]'"
TRANSFORMERS = "transformers"  # imported by name, only when a transformers model is asked for


class MissingExtraError(ImportError):
    """An optional dependency is not installed; the message names the extra that provides it."""


def require_transformers() -> Any:
    """The ``transformers`` module; :class:`MissingExtraError` (one line, naming the ``hf`` extra) if
    it is not installed."""
    try:
        return importlib.import_module(TRANSFORMERS)
    except ImportError:
        raise MissingExtraError(
            f"the transformers models need the optional 'hf' extra (transformers); install it with {EXTRA_HINT}"
        ) from None
