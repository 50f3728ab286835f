#!/usr/bin/env bash
# Bounded libFuzzer run of the loader: ./fuzz.sh [SECONDS] [CORPUS_DIR]
# Needs clang with libFuzzer (Debian/Ubuntu: apt-get install clang). The seed corpus is
# any .poet files in CORPUS_DIR (e.g. written by the test suite or `poetc compile`).
set -euo pipefail
cd "$(dirname "$0")"
SECONDS_TO_RUN="${1:-30}"
CORPUS="${2:-build/corpus}"
make -s fuzz
mkdir -p "$CORPUS"
exec build/fuzz_loader -max_total_time="$SECONDS_TO_RUN" -max_len=65536 -timeout=10 -print_final_stats=1 "$CORPUS"
