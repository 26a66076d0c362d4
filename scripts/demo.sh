#!/usr/bin/env bash
# The main job on a fresh machine: install dependencies, build, and generate text with the
# embedded default model.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh"
bash "$root/scripts/build.sh"
"$root/build/kvserve" run --prompt "Once upon a time" -n 64 --seed 1 "$@"
"$root/build/kvserve" run --chat --prompt "What sound does a cow make?" --temp 0
