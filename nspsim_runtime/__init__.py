"""nspsim runtime: executes nspsim Plan objects with torch.distributed (gloo on CPU, NCCL on GPU).

This package imports torch; ``nspsim`` never imports it (one-way layering).
"""
