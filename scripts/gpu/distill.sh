#!/usr/bin/env bash
# The query encoder's fine-tuning on a GPU machine, from a teacher pack (training/query_encoder/pack.py):
# all six MiniLM layers and the projection, two runs (without and with user-like slips), each keeping its
# best epoch on the realistic KBs' dev queries. The folders are returned as one tar in parts of 15 MB.
#   bash scripts/gpu/distill.sh PACK OUT_DIR [MINUTES_PER_RUN]
set -euo pipefail
pack=$1 out=$2 minutes=${3:-3} py=${PYTHON:-python3}
kbs=() devs=()
for s in energy council grocery campus_it; do
  kbs+=(--kb "evaluation/data/$s/faq.jsonl"); devs+=(--dev "evaluation/data/$s/dev.jsonl")
done
mkdir -p runs/gpu
for typos in 0 0.3; do
  "$py" scripts/gpu/train_query_encoder.py --teacher-pack "$pack" --out "runs/gpu/l6-typos$typos" \
    --work runs/gpu/work "${kbs[@]}" "${devs[@]}" --train-layers 6 --epochs 40 --patience 4 \
    --typos "$typos" --max-minutes "$minutes" 2>&1 | grep -v -E "it/s\]|Loading weights" | tee -a "$out/distill.log"
done
rm -rf runs/gpu/work
for d in runs/gpu/l6-*; do rm -f "$d/checkpoint.pt"; done
tar cf - runs/gpu | split -b 15M - "$out/gpu-runs.tar.part-"
