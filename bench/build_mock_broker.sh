#!/bin/sh
# Build bench/mock_broker.c (librdkafka's in-memory mock cluster as a standalone reference broker) for
# bench/c_bench.py and bench/partitions_bench.py `--reference`. Bench-only, never a dependency.
#
# Usage: bench/build_mock_broker.sh SRC_DIR
#   SRC_DIR is the librdkafka source tree that bench/build_rdkafka_perf.sh built (it provides
#   src/librdkafka.a and Makefile.config's link flags). The binary is written to
#   SRC_DIR/examples/strom_mock_broker, outside this repository, and its path printed on the last line.
set -eu

src=${1:?usage: $0 LIBRDKAFKA_SOURCE_DIR}
src=$(cd "$src" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
out="$src/examples/strom_mock_broker"

if [ ! -f "$src/src/librdkafka.a" ]; then
    echo "no $src/src/librdkafka.a: run bench/build_rdkafka_perf.sh $src first" >&2
    exit 1
fi
if [ -x "$out" ] && [ "$out" -nt "$here/mock_broker.c" ] && [ "$out" -nt "$src/src/librdkafka.a" ]; then
    echo "$out"
    exit 0
fi
libs=$(sed -n 's/^LIBS+=//p' "$src/Makefile.config" | tr '\n' ' ')
# shellcheck disable=SC2086 # the link flags are a word list
cc -O2 -I"$src/src" "$here/mock_broker.c" -o "$out" "$src/src/librdkafka.a" $libs
echo "$out"
