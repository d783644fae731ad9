#!/usr/bin/env bash
# Regenerates docs/figures/p00*.svg: one figure per paper, drawn by nb's own commands in its house
# style, from tiny local inputs (no download): the Botchan sample corpus and 2k BPE tokenizer bundled
# with nb (nbcli/data/), and three runs of nb's tiny Transformer trained on it here, on the CPU.
# What the figures show is described in docs/cli.md#figures-of-the-papers. About 7 minutes of CPU
# (7 minutes on a quiet machine, 16 on two busy cores).
#
#   bash docs/make_figures.sh            # from the repository root; needs pip install 'nbcli[plot]'
set -euo pipefail
cd "$(dirname "$0")/.."
out=docs/figures
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
data=$(python3 -c "from nbcli.samples import SAMPLE_CORPUS as c, SAMPLE_TOKENIZER as t; print(c, t)")
read -r corpus tok <<<"$data"
nb() { python3 -m nbcli "$@"; }
small=(--steps 60 --seq-len 64 --batch-size 8 --eval-every 5 --eval-batches 2 --device cpu --seed 0)

# paper 000: a causal LM with its output bias initialised to the log-unigram, and one with a zero bias
nb train --corpus "$corpus" -t "$tok" --out "$work/unigram" --bias-init unigram "${small[@]}" >/dev/null
nb train --corpus "$corpus" -t "$tok" --out "$work/zero" --bias-init zero "${small[@]}" >/dev/null
nb plot-run "$work/unigram" "$work/zero" -o "$work/runs" --figure-format svg \
    --title "Botchan, tiny Transformer (60 updates): output bias initialised to log-unigram vs 0" >/dev/null
cp "$work/runs/divergence.svg" "$out/p000-divergence.svg"                 # paper 000 fig. 1
nb count-unigrams "$corpus" -t "$tok" -o "$work/counts.safetensors" >/dev/null
for arm in unigram zero; do
  nb eval "$work/$arm/step-60.safetensors" --corpus "$corpus" -t "$tok" --by-frequency "$work/counts.safetensors" \
      --bins 8 --device cpu --json > "$work/$arm.json"
done
nb plot-by-frequency "$work/unigram.json" "$work/zero.json" --label "bias init unigram" --label "bias init 0" \
    -o "$out/p000-by-frequency.svg" >/dev/null                               # paper 000 fig. 4

# paper 001: an MLM run whose heads 0-1 are guided towards [Next] and [Prev], saved at 0, 20, 40, 60
nb train --corpus "$corpus" -t "$tok" --out "$work/ag" --objective mlm --ag-fraction 0.5 --save-every 20 \
    "${small[@]}" >/dev/null
nb attention-maps "$work/ag" -t "$tok" --sentence "Welcome to EMNLP." -o "$out/p001-attention-maps.svg" >/dev/null

# paper 002: the trained embedding and nb's initialisations of it (tables 2, 6, 8)
nb embedding-stats "$work/unigram/step-60.safetensors" --inits all --plot "$out/p002-embedding-stats.svg" >/dev/null

# paper 003: each token's predicted probability with and without b_LN (fig. 1)
nb eval "$work/unigram/step-60.safetensors" --corpus "$corpus" -t "$tok" --counts "$work/counts.safetensors" \
    --bias-effect-plot "$out/p003-bias-effect.svg" --device cpu >/dev/null
ls -l "$out"/p00*.svg
