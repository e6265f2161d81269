#!/bin/sh
# Build librdkafka's C `rdkafka_performance` tool, for bench/c_bench.py only (never a dependency).
#
# Usage: bench/build_rdkafka_perf.sh SRC_DIR
#   SRC_DIR is an unpacked librdkafka source tree (a release tarball, or `git archive` of a clone),
#   kept outside this repository. Debian packages used: build-essential, zlib1g-dev, libssl-dev and,
#   optionally, libzstd-dev / liblz4-dev. Nothing is downloaded: mklove's dependency installer is off.
#
# Idempotent: a tool already built from the same tree is left alone; the path of the binary is
# printed on the last line either way (`SRC_DIR/examples/rdkafka_performance`).
set -eu

src=${1:?usage: $0 LIBRDKAFKA_SOURCE_DIR}
src=$(cd "$src" && pwd)
tool="$src/examples/rdkafka_performance"

if [ -x "$tool" ] && [ "$tool" -nt "$src/src/rdkafka.c" ]; then
    echo "$tool"
    exit 0
fi

cd "$src"
if [ ! -f Makefile.config ]; then
    # Its log goes to build-configure.out: mklove would load a file named configure.* as a module.
    # No SASL (Cyrus) or curl (OIDC): the benchmark uses PLAINTEXT. SSL stays on when libssl-dev exists.
    ./configure --disable-gssapi --disable-curl --disable-sasl --prefix="$src/_install" >build-configure.out 2>&1 \
        || { tail -30 build-configure.out; exit 1; }
fi
jobs=$(nproc 2>/dev/null || echo 2)
make -j"$jobs" libs >build-make.out 2>&1 || { tail -30 build-make.out; exit 1; }
make -C examples rdkafka_performance >>build-make.out 2>&1 || { tail -30 build-make.out; exit 1; }
echo "$tool"
