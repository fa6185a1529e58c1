#!/bin/sh
# Install Debian's Chromium and ChromeDriver for the dashboard browser test
# (marker `browser`) when they are missing, and print what was done.
#   scripts/install-browser.sh
# Needs root (apt-get). Never downloads a browser build of its own: the
# test drives the system browser at /usr/bin/chromium via /usr/bin/chromedriver.
set -eu
need=""
command -v chromium >/dev/null 2>&1 || need="$need chromium"
command -v chromedriver >/dev/null 2>&1 || need="$need chromium-driver"
if [ -z "$need" ]; then
    echo "install-browser: already installed: $(chromium --version 2>/dev/null | head -n1); $(chromedriver --version 2>/dev/null | head -n1)"
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "install-browser: missing:$need; run as root (apt-get install$need)" >&2
    exit 1
fi
echo "install-browser: installing:$need"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null
# shellcheck disable=SC2086  # word splitting of the package list is intended
apt-get install -y -q --no-install-recommends $need >/dev/null
echo "install-browser: installed: $(chromium --version 2>/dev/null | head -n1); $(chromedriver --version 2>/dev/null | head -n1)"
