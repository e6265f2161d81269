#!/usr/bin/env bash
# Idempotent installer: a virtualenv in .venv with Strom and, on request, its test/spark extras and the
# Debian packages the test suites drive (kcat, zookeeper, a JRE for Spark, iproute2 and nftables for the
# fault suite's network namespaces). Safe to run repeatedly: apt-get runs only if something is missing.
#   scripts/install.sh            -> runtime only (enough for `make run`)
#   scripts/install.sh test       -> + test tools, Spark extra, kcat, zookeeper, JRE, iproute2, nftables,
#                                    chromium + chromium-driver (console tests)
set -euo pipefail
cd "$(dirname "$0")/.."
want="${1:-run}"
PY="${PYTHON:-python3}"

if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=".venv/.strom-install-$want"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  if [ "$want" = "test" ]; then
    .venv/bin/python -m pip install -q -e '.[test,spark]'
  else
    .venv/bin/python -m pip install -q -e .
  fi
  touch "$stamp"
fi

if [ "$want" = "test" ]; then
  need=()
  command -v kcat >/dev/null 2>&1 || need+=(kcat)
  [ -x /usr/share/zookeeper/bin/zkServer.sh ] || need+=(zookeeper)
  command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
  command -v ip >/dev/null 2>&1 || need+=(iproute2)
  command -v nft >/dev/null 2>&1 || need+=(nftables)
  # The web console's browser tests (tests/browser.py): headless Chromium and its WebDriver.
  command -v chromium >/dev/null 2>&1 || need+=(chromium)
  command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)
  if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" = "0" ]; then SUDO=""; else SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
  fi
fi
