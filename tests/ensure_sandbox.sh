#!/bin/sh
# Installs what grading in a sandbox needs (tools/grading/sandbox.py): Debian's `bubblewrap`
# (apt-get) when `bwrap` is missing, then checks that it can make a sandbox here (Linux with user
# namespaces). `make test-nbgrader` and `make test-grade` run it first.
# Usage: sh tests/ensure_sandbox.sh
set -eu
# the sandbox's own test of where the course and its Python lie (tools/grading/sandbox.py: stdlib only)
clash=$(cd "$(dirname "$0")/.." && python3 -c 'from tools.grading.sandbox import scratch_clash; print(scratch_clash() or "")')
if [ -n "$clash" ]; then
    echo "grading tests: $clash, so nothing of it would be seen inside: clone the course elsewhere" >&2
    exit 1
fi
if ! command -v bwrap >/dev/null 2>&1; then
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "grading tests: no bwrap, and no apt-get to install it: install bubblewrap" >&2
        echo "  (your distribution's package), or run with COURSE_UNSANDBOXED=1 to test without it" >&2
        exit 1
    fi
    SUDO=
    if [ "$(id -u)" != 0 ]; then
        if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
            SUDO="sudo -n"
        else
            echo "grading tests: bwrap is missing and installing it needs root. Run once:" >&2
            echo "  sudo apt-get update && sudo apt-get install -y bubblewrap" >&2
            exit 1
        fi
    fi
    echo "grading tests: installing Debian's bubblewrap (apt-get)"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq bubblewrap
fi
if [ "${COURSE_UNSANDBOXED:-}" != 1 ] && ! bwrap --unshare-all --unshare-user --ro-bind / / true 2>/dev/null; then
    echo "grading tests: bwrap is installed but cannot make a sandbox here (are user namespaces" >&2
    echo "  switched off? sysctl kernel.unprivileged_userns_clone / apparmor_restrict_unprivileged_userns)" >&2
    exit 1
fi
