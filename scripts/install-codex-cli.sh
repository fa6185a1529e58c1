#!/bin/sh
# Install the OpenAI Codex CLI into a project-local directory (default .tools/codex)
# and print the path of its executable. Used by the codex_cli test tier and CI.
#   scripts/install-codex-cli.sh [DIR]
# CODEX_CLI_VERSION overrides the pinned version; the recorded fixtures in
# tests/fixtures/codex/ were made with the pinned one.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-"$root/.tools/codex"}
version=${CODEX_CLI_VERSION:-0.169.0}
bin="$dir/node_modules/.bin/codex"
if ! command -v npm >/dev/null 2>&1; then
    echo "install-codex-cli: npm not found; install Node.js 18+ first" >&2
    exit 1
fi
installed=$("$bin" --version 2>/dev/null || true)
if [ "$installed" != "codex-cli $version" ]; then
    mkdir -p "$dir"
    [ -f "$dir/package.json" ] || printf '{"name":"codex-cli-tools","private":true}\n' >"$dir/package.json"
    npm install --prefix "$dir" --no-audit --no-fund --loglevel=error \
        "@openai/codex@$version" >&2
fi
if [ ! -x "$bin" ]; then
    echo "install-codex-cli: $bin missing after npm install" >&2
    exit 1
fi
echo "$bin"
