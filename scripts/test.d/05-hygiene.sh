#!/usr/bin/env bash
# Hygiene that keeps the tree as docs/architecture.md describes it: formatted (rustfmt.toml),
# clippy-clean with warnings as errors, API docs that build with warnings as errors. The layer
# check (imports run one way) is the cargo test tests/hygiene/layers.rs.
set -uo pipefail
. "$(dirname "$0")/../lib/suite.sh"
suite_check_log fmt target/hygiene-fmt.log cargo fmt --all --check
suite_check_log clippy target/hygiene-clippy.log cargo clippy --release --locked --all-targets -- -D warnings
suite_check_log doc target/hygiene-doc.log env RUSTDOCFLAGS="-D warnings" cargo doc --release --locked --no-deps
suite_end hygiene
