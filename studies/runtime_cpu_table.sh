#!/bin/bash
# The 4-rank CPU (gloo) table of docs/runtime.md: one torchrun per row, then runtime.report.
# Usage: studies/runtime_cpu_table.sh [OUT_DIR]   (default out/runtime-cpu; needs `make install-dev`)
set -u
cd "$(dirname "$0")/.." && . .venv/bin/activate
out=${1:-out/runtime-cpu}
mkdir -p "$out"
base=(--trace wikipedia --model tiny --steps 6 --tokens-per-batch 16k --max-context 4k --token-budget 5k --seed 0)
run() {
    local name=$1; shift
    torchrun --standalone --nproc-per-node 4 -m runtime.train "$@" "${base[@]}" --records "$out/$name.jsonl" \
        > "$out/$name.log" 2>&1 || echo "run $name failed: see $out/$name.log" >&2
}
names=()
for p in static flexsp basp nsp2l nsp greedy; do run "$p" --planner "$p"; names+=("$p"); done
run nsp-lookahead0 --planner nsp --lookahead 0; names+=(nsp-lookahead0)
run nsp-ring --planner nsp --backend ring; names+=(nsp-ring)
run nsp-allreduce --planner nsp --grad-sync allreduce; names+=(nsp-allreduce)
files=(); for n in "${names[@]}"; do files+=("$out/$n.jsonl"); done
python -m runtime.report "${files[@]}"
