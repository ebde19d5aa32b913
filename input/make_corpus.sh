#!/usr/bin/env bash
# Builds the small real-text corpus the decks in input/ train on, from text that
# every Debian system carries (the license texts and package copyright files),
# and tokenizes it into train and validation shards (byte-level, vocab 257).
#   usage: input/make_corpus.sh [TRIDENT_BINARY] [OUT_DIR]
set -euo pipefail
bin=${1:-build/src/trident}
out=${2:-data}
mkdir -p "$out"
text="$out/corpus.txt"
{
  find /usr/share/common-licenses -type f | sort | xargs cat
  find /usr/share/doc -name copyright -type f | sort | sed -n '1,600p' | xargs cat
} > "$text"
bytes=$(stat -c %s "$text")
val_bytes=$(( bytes / 20 ))  # the last 5% is held out for validation
head -c $(( bytes - val_bytes )) "$text" > "$out/corpus_train.txt"
tail -c "$val_bytes" "$text" > "$out/corpus_val.txt"
"$bin" tokenize "$out/corpus_train.txt" "$out/corpus_train.bin"
"$bin" tokenize "$out/corpus_val.txt" "$out/corpus_val.bin"
