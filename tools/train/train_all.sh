#!/usr/bin/env bash
# The whole recipe of models/: corpus and tokenizer, both sizes, GGUF exports, test fixtures.
#   apt-get install python3-torch python3-sentencepiece libopenblas0-pthread
#   bash tools/train/train_all.sh [WORK_DIR]        (about 2 hours on 2 cores)
# Without libopenblas0-pthread Debian's torch falls back to the reference BLAS, ~10x slower.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=${1:-$root/build/train}
py=/usr/bin/python3
cd "$root"
# The tokenizer is trained on the story-and-dialogue corpus only; the later corpus with JSON and
# tools is encoded with it (`encode`), so the vocabulary never changes.
$py tools/train/train.py tokenizer --work "$work"
# One thread each so both sizes can train side by side on a 2-core machine.
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
# Stories and dialogues. The target in two phases: 700 steps, then 500 more from those weights
# with a fresh warm-up and cosine schedule.
( $py tools/train/train.py model --work "$work" --size target --steps 700 --threads 1 &&
  $py tools/train/train.py model --work "$work" --size target --steps 500 --threads 1 \
    --resume --lr 6e-4 --warmup 20 ) &
$py tools/train/train.py model --work "$work" --size draft --steps 1200 --threads 1
wait
# Then both sizes resume on a mixed corpus (a fresh seed: 68% stories and dialogues, 25% JSON
# answers, 7% tool dialogues by documents) in 1024-token windows, long enough for a tool
# prompt (its system turn alone is 400 to 700 tokens).
$py tools/train/train.py encode --work "$work" --name mix --seed 3 --docs 40000 --json 0.25 --tools 0.07
phase3=(--data mix --resume --seq 1024 --batch 4 --lr 5e-4 --warmup 20 --threads 1)
$py tools/train/train.py model --work "$work" --size target --steps 260 "${phase3[@]}" &
$py tools/train/train.py model --work "$work" --size draft --steps 400 "${phase3[@]}"
wait
# A last short phase of the target on another seed of a like mix (20% JSON, 7% tools), in
# 512-token windows at a lower rate: as models/ was made (models/README.md says why).
$py tools/train/train.py encode --work "$work" --name mix3 --seed 5 --docs 20000 --json 0.2 --tools 0.07
$py tools/train/train.py model --work "$work" --size target --data mix3 --resume --seq 512 \
  --batch 8 --steps 80 --lr 2e-4 --warmup 5 --threads 1
mkdir -p models/training tests/data/trained
for size in target draft; do
  name=kvserve-tiny; [ $size = draft ] && name=kvserve-tiny-draft
  for type in f32 f16 q8_0; do
    fixture=(); [ $type = f32 ] && fixture=(--fixture tests/data/trained)
    $py tools/train/export_gguf.py --work "$work" --size $size --name $name --type $type \
      --out models/$name-$type.gguf "${fixture[@]}"
  done
  cp "$work/$size.loss.csv" models/training/$name.loss.csv
done
$py tools/train/train.py heldout --work "$work" --out models/heldout.txt
