#!/usr/bin/env bash
# The whole recipe of models/: corpus and tokenizer, both sizes, GGUF exports, test fixtures.
#   apt-get install python3-torch python3-sentencepiece libopenblas0-pthread
#   bash tools/train/train_all.sh [WORK_DIR]        (about an hour on 2 cores)
# Without libopenblas0-pthread Debian's torch falls back to the reference BLAS, ~10x slower.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=${1:-$root/build/train}
py=/usr/bin/python3
cd "$root"
$py tools/train/train.py tokenizer --work "$work"
# One thread each so both sizes can train side by side on a 2-core machine.
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
# The target in two phases (as models/ was made): 700 steps, then 500 more from those weights
# with a fresh warm-up and cosine schedule.
( $py tools/train/train.py model --work "$work" --size target --steps 700 --threads 1 &&
  $py tools/train/train.py model --work "$work" --size target --steps 500 --threads 1 \
    --resume --lr 6e-4 --warmup 20 ) &
$py tools/train/train.py model --work "$work" --size draft --steps 1200 --threads 1
wait
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
