#!/usr/bin/env bash
# vendor/hyper is hyper 1.12.0 exactly as published on crates.io, with vendor/hyper.patch applied
# (why: vendor/README.md). Cargo.toml and fuzz/Cargo.toml build against it ([patch.crates-io]).
#   scripts/vendor-hyper.sh           re-create vendor/hyper from the published crate and the patch
#   scripts/vendor-hyper.sh --check   fail unless vendor/hyper is exactly that (scripts/test.sh runs it)
# The crate is checked against the checksum crates.io's index gives for it (as Cargo.lock had it).
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=1.12.0
SHA256=2c3e324da4c95177d6291d4c8730197c0d1822f8a9766814a4a44fa5ab797c9c
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
crate=$(ls "${CARGO_HOME:-$HOME/.cargo}"/registry/cache/*/hyper-$VERSION.crate 2>/dev/null | head -1 || true)
if [ -z "$crate" ]; then
  crate=$work/hyper-$VERSION.crate
  curl -fsSL --retry 3 -o "$crate" "https://static.crates.io/crates/hyper/hyper-$VERSION.crate"
fi
echo "$SHA256  $crate" | sha256sum --check --quiet - || {
  echo "scripts/vendor-hyper.sh: $crate is not hyper $VERSION as published (checksum differs)" >&2
  exit 1
}
tar -xzf "$crate" -C "$work"
fresh=$work/hyper-$VERSION
rm -f "$fresh/.cargo-ok"
(cd "$fresh" && git apply --whitespace=nowarn "$OLDPWD/vendor/hyper.patch")
if [ "${1:-}" = --check ]; then
  if ! diff -r "$fresh" vendor/hyper >"$work/diff"; then
    echo "scripts/vendor-hyper.sh: vendor/hyper is not hyper $VERSION with vendor/hyper.patch applied:" >&2
    head -40 "$work/diff" >&2
    echo "(edit the patch, not the tree: change vendor/hyper, then regenerate the patch with" >&2
    echo " 'diff -ruN' against the published crate, or run scripts/vendor-hyper.sh to start over)" >&2
    exit 1
  fi
  echo "vendor/hyper is hyper $VERSION from crates.io with vendor/hyper.patch"
else
  rm -rf vendor/hyper
  cp -r "$fresh" vendor/hyper
  echo "vendor/hyper re-created: hyper $VERSION from crates.io with vendor/hyper.patch"
fi
