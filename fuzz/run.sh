#!/usr/bin/env bash
# Fuzz the ecosystem parser+validator and the control protocol's decoding,
# each for a bounded time (default 60 s), seeded from the test fixtures.
# Not part of .ci/run. Needs cargo-fuzz (installed if missing); this machine has
# only stable Rust, so RUSTC_BOOTSTRAP=1 lets cargo-fuzz use its nightly flags.
# A crash leaves its input in fuzz/artifacts/TARGET/: keep it as a regression
# fixture (tests/it/fixtures/invalid/ or a unit test) once fixed.
set -euo pipefail
cd "$(dirname "$0")"
seconds="${1:-60}"
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
mkdir -p corpus/ecosystem corpus/control
cp ../tests/it/fixtures/valid/*.yaml ../tests/it/fixtures/invalid/*.yaml ../examples/*/ecosystem.yaml corpus/ecosystem/ 2>/dev/null || true
for cmd in '{"v":1,"cmd":"status"}' '{"v":1,"cmd":"reload","app":"web"}' '{"v":1,"cmd":"logs","target":"web.1","lines":5,"follow":true}' \
           '{"v":1,"cmd":"stop","target":"web"}' '{"v":2,"cmd":"status"}'; do
    printf '%s' "$cmd" > "corpus/control/$(printf '%s' "$cmd" | sha256sum | cut -c1-16)"
done
for target in ecosystem control; do
    echo "== fuzzing $target for ${seconds}s"
    RUSTC_BOOTSTRAP=1 cargo fuzz run "$target" "corpus/$target" -- -max_total_time="$seconds" -rss_limit_mb=2048
done
