#!/usr/bin/env bash
# Fixtures for the CLI tests: good shards, corrupt shards and a tiny deck.
#   usage: make_fixtures.sh TRIDENT_BINARY DIR
set -euo pipefail
bin=$1 dir=$2
rm -rf "$dir" && mkdir -p "$dir"
for i in $(seq 1 400); do echo "line $i: the quick brown fox jumps over the lazy dog; data parallel training."; done > "$dir/text.txt"
"$bin" tokenize "$dir/text.txt" "$dir/train.bin" >/dev/null
head -c 4000 "$dir/text.txt" | "$bin" tokenize - "$dir/val.bin" >/dev/null
cp "$dir/train.bin" "$dir/badmagic.bin" && printf '\x01\x02\x03\x04' | dd of="$dir/badmagic.bin" conv=notrunc status=none
cp "$dir/train.bin" "$dir/badversion.bin" && printf '\x07\x00\x00\x00' | dd of="$dir/badversion.bin" bs=1 seek=4 conv=notrunc status=none
head -c 5000 "$dir/train.bin" > "$dir/truncated.bin"
cat > "$dir/tiny.toml" <<DECK
[model]
layers = 2
d_model = 32
heads = 4
seq_len = 32
vocab = 257
[data]
train = "$dir/train.bin"
val = "$dir/val.bin"
[train]
steps = 30
batch = 8
micro_batch = 2
lr = 1e-2
warmup = 5
min_lr = 1e-3
eval_every = 10
eval_sequences = 8
[output]
log_every = 10
[system]
threads = 1
peak_tflops = 0.01
DECK
printf '[model]\nlayers = 2\n[train]\nstpes = 10\n' > "$dir/typo.toml"
printf '[model\nlayers = 2\n' > "$dir/syntax.toml"
# Token ids from "another tokenizer" in a uint32 shard: 300 small ids and, at
# position 200, 70000 (above uint16's range).
{ seq 1 200; echo 70000; seq 1 100; } | "$bin" tokenize --ids --vocab 131072 - "$dir/ids32.bin" >/dev/null
