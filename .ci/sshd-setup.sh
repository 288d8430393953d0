#!/usr/bin/env bash
# Make a local OpenSSH server available for the SSH host tests (tests/sshd_fixture.py).
# The fixture starts its own sshd (throwaway keys, free port on 127.0.0.1); this
# script only installs the binary and the privilege-separation folder it needs.
# Idempotent; needs root (or sudo) only when something is missing.
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi

sshd_path() {
    command -v sshd 2>/dev/null || { [ -x /usr/sbin/sshd ] && echo /usr/sbin/sshd; } || true
}

if [ -z "$(sshd_path)" ]; then
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "sshd-setup: sshd is missing and apt-get is not available; install openssh-server" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends openssh-server openssh-client >/dev/null
fi

# sshd refuses to start without its privilege-separation folder.
$SUDO mkdir -p /run/sshd
$SUDO chmod 0755 /run/sshd

for tool in ssh-keygen; do
    command -v "$tool" >/dev/null 2>&1 || { echo "sshd-setup: $tool is missing" >&2; exit 1; }
done
echo "sshd-setup: $(sshd_path) ready ($("$(sshd_path)" -V 2>&1 | head -n1 || true))"
