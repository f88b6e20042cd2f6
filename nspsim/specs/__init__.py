"""Frozen, validated specs of what is trained on what: the model, the cluster, the training
settings and the memory model derived from them (B_tok). Presets are plain functions."""
