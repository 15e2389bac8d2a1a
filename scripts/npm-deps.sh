#!/usr/bin/env bash
# npm: OpenCode, playwright-core and oidc-provider (the SSO tests' identity provider) at the
# versions package-lock.json pins, into ./node_modules (git-ignored), unless already there.
# Shared by scripts/test.sh and bench/run.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
want=$(node -p 'require("./package.json").dependencies["opencode-ai"]')
have=$(node -p 'try { require("./node_modules/opencode-ai/package.json").version } catch { "" }')
if [ "$have" != "$want" ] || [ ! -x node_modules/.bin/opencode ] || [ ! -d node_modules/playwright-core ] || [ ! -d node_modules/oidc-provider ]; then
  printf '\n==> %s\n' "installing opencode-ai@$want"
  # `npm install` with the committed lock, not `npm ci`: the registry here lacks the other
  # platforms' optional binaries, which `npm ci` insists on finding in the lock.
  npm install --no-audit --no-fund --loglevel=error
fi
node_modules/.bin/opencode --version
