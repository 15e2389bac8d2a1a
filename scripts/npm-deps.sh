#!/usr/bin/env bash
# npm: both pinned OpenCodes (opencode-ai 1.x, @opencode/cli 2.x), playwright-core and
# oidc-provider (the SSO tests' identity provider) at the versions package-lock.json pins, into
# ./node_modules (git-ignored), unless already there. Shared by scripts/test.sh and bench/run.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
pinned() { node -p "require('./package.json').dependencies['$1']"; }
installed() { node -p "try { require('./node_modules/$1/package.json').version } catch { '' }"; }
v1=$(pinned opencode-ai) v2=$(pinned @opencode/cli)
if [ "$(installed opencode-ai)" != "$v1" ] || [ "$(installed @opencode/cli)" != "$v2" ] \
  || [ ! -d node_modules/playwright-core ] || [ ! -d node_modules/oidc-provider ]; then
  printf '\n==> %s\n' "installing opencode-ai@$v1 and @opencode/cli@$v2"
  # `npm install` with the committed lock, not `npm ci`: the registry here lacks the other
  # platforms' optional binaries, which `npm ci` insists on finding in the lock.
  npm install --no-audit --no-fund --loglevel=error
fi
# Both packages name a bin `opencode`, and which one npm links there depends on its order. The
# suite and the dev config run 1.x as `opencode`; 2.x is `opencode2` (its package's own second
# bin). Linked here, so neither depends on npm's order.
ln -sfn ../opencode-ai/bin/opencode.exe node_modules/.bin/opencode
ln -sfn ../@opencode/cli/bin/opencode.exe node_modules/.bin/opencode2
node_modules/.bin/opencode --version
node_modules/.bin/opencode2 --version
