#!/bin/sh
# Installs what `make test-browser` needs and nothing else:
#   * Debian's `chromium` (apt-get) when $CHROMIUM (default /usr/bin/chromium) is missing;
#   * PyPI `playwright` into the course's virtualenv, at the version pinned in constraints.txt.
# Playwright never downloads a browser here: the harness launches the system Chromium.
# Usage: sh tests/browser/ensure_browser.sh .venv/bin/python
set -eu
PY=${1:-.venv/bin/python}
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
HERE=$(cd "$(dirname "$0")/../.." && pwd)

if [ ! -x "$CHROMIUM" ]; then
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "test-browser: no Chromium at $CHROMIUM and no apt-get to install it." >&2
        echo "  Install Chromium yourself and run: make test-browser CHROMIUM=/path/to/chromium" >&2
        exit 1
    fi
    SUDO=
    if [ "$(id -u)" != 0 ]; then
        if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
            SUDO="sudo -n"
        else
            echo "test-browser: Chromium is missing and installing it needs root. Run once:" >&2
            echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends chromium fonts-liberation" >&2
            echo "  (or: make test-browser CHROMIUM=/path/to/an/existing/chromium)" >&2
            exit 1
        fi
    fi
    echo "test-browser: installing Debian's chromium (apt-get)"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium fonts-liberation
    [ -x "$CHROMIUM" ] || { echo "test-browser: apt-get finished but $CHROMIUM is still missing" >&2; exit 1; }
fi

# A no-op (no network) when the pinned version is already installed.
"$PY" -m pip install --quiet --disable-pip-version-check -c "$HERE/constraints.txt" playwright
