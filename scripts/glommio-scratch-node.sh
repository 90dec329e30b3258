#!/usr/bin/env bash
# A scratch release `tessera` built from HEAD against a patched copy of the registry's glommio
# 0.9.0, for measurements only: nothing in the repository changes (the build runs in a
# temporary worktree whose Cargo.toml gains a [patch.crates-io] entry; its target directory is
# target/glommio-scratch). Used by scripts/executor-rounds.sh (scripts/glommio-rounds.patch)
# and for the fence barrier of session 14 (scripts/glommio-fence-barrier.patch).
# Usage: scripts/glommio-scratch-node.sh PATCH OUT_BINARY
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
patch_file=$(realpath "$1"); out=$2
tmp=$(mktemp -d /tmp/glommio-scratch.XXXXXX)
cleanup() { git -C "$repo" worktree remove --force "$tmp/tree" 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
glommio=$(cargo metadata --format-version 1 --locked 2>/dev/null | python3 -c '
import json, os, sys
print(next(os.path.dirname(p["manifest_path"]) for p in json.load(sys.stdin)["packages"]
           if p["name"] == "glommio" and p["version"] == "0.9.0"))')
cp -r "$glommio" "$tmp/glommio"
patch -s -d "$tmp/glommio" -p1 <"$patch_file"
git worktree add -q --detach "$tmp/tree" HEAD
printf '\n[patch.crates-io]\nglommio = { path = "%s" }\n' "$tmp/glommio" >>"$tmp/tree/Cargo.toml"
echo "glommio-scratch-node: building with $(basename "$patch_file") (target/glommio-scratch)" >&2
(cd "$tmp/tree" && CARGO_TARGET_DIR="$repo/target/glommio-scratch" cargo build -q --release -p node)
cp "$repo/target/glommio-scratch/release/tessera" "$out"
