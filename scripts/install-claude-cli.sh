#!/bin/sh
# Install the Claude Code CLI into a project-local directory (default .tools/claude)
# and print the path of its executable. Used by the claude_cli test tier and CI.
#   scripts/install-claude-cli.sh [DIR]
# CLAUDE_CLI_VERSION overrides the pinned version, which is the one
# docs/deploy/Containerfile installs (tests/unit/test_tool_pins.py keeps them equal).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-"$root/.tools/claude"}
version=${CLAUDE_CLI_VERSION:-2.1.330}
bin="$dir/node_modules/.bin/claude"
if ! command -v npm >/dev/null 2>&1; then
    echo "install-claude-cli: npm not found; install Node.js 18+ first" >&2
    exit 1
fi
installed=$("$bin" --version 2>/dev/null || true)
if [ "${installed%% *}" != "$version" ]; then
    mkdir -p "$dir"
    [ -f "$dir/package.json" ] || printf '{"name":"claude-cli-tools","private":true}\n' >"$dir/package.json"
    npm install --prefix "$dir" --no-audit --no-fund --loglevel=error \
        "@anthropic-ai/claude-code@$version" >&2
fi
if [ ! -x "$bin" ]; then
    echo "install-claude-cli: $bin missing after npm install" >&2
    exit 1
fi
echo "$bin"
