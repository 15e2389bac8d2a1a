#!/usr/bin/env bash
# Build the Debian package target/debian/opencode-gateway_<version>-<revision>_<arch>.deb for
# this machine's architecture: the release binary, then the shell completions and the man page it
# writes from its own command line (target/deb-files/), then cargo-deb at the pinned version
# (installed when missing), which strips the binary and packs what Cargo.toml's
# [package.metadata.deb] lists. Arguments go to cargo deb (e.g. --deb-revision 2).
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO_DEB_VERSION=3.8.0
if [ "$(cargo deb --version 2>/dev/null)" != "cargo-deb $CARGO_DEB_VERSION" ]; then
  printf '\n==> %s\n' "installing cargo-deb $CARGO_DEB_VERSION"
  cargo install --locked cargo-deb --version "$CARGO_DEB_VERSION"
fi

cargo build --release --locked
rm -rf target/deb-files
target/release/opencode-gateway package-files target/deb-files >/dev/null
# --no-build: the binary just built is the one that wrote the completions and the man page.
cargo deb --no-build --locked "$@"
