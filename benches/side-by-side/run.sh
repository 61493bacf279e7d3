#!/usr/bin/env bash
# Durable work side by side (see BENCHMARKS.md): graphile-worker, apalis-postgres and
# retry-durable on one throwaway PostgreSQL cluster, then the SQLite rows (ours, apalis-sqlite,
# the raw SQL floor) of the durable bench.
#
#   benches/side-by-side/run.sh [--items N] [--rounds N] [--latency-jobs N] [--no-latency]
#                               [--only NAME] [--no-sqlite]
#
# graphile-worker (the version pinned in package.json beside this script) is installed from
# the npm registry into SIDE_BY_SIDE_NODE_DIR (default ~/.cache/retry-side-by-side/node),
# outside the repository: nothing it downloads is committed.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
node_dir="${SIDE_BY_SIDE_NODE_DIR:-$HOME/.cache/retry-side-by-side/node}"

args=()
items=50000
sqlite=1
while [ $# -gt 0 ]; do
  case "$1" in
    --no-sqlite) sqlite=0 ;;
    --items) items="$2"; args+=("$1" "$2"); shift ;;
    *) args+=("$1") ;;
  esac
  shift
done

mkdir -p "$node_dir"
if ! cmp -s "$here/package.json" "$node_dir/package.json" || [ ! -d "$node_dir/node_modules/graphile-worker" ]; then
  cp "$here/package.json" "$node_dir/package.json"
  (cd "$node_dir" && npm install --no-package-lock --no-audit --no-fund --loglevel=error)
fi

cd "$root"
echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'); $(uptime)"
SIDE_BY_SIDE_NODE_DIR="$node_dir" cargo bench -p retry-benches --bench side_by_side -- "${args[@]}"
if [ "$sqlite" = 1 ]; then
  echo
  echo "== SQLite: retry-durable, apalis-sqlite and the raw SQL floor (benches/durable.rs)"
  cargo bench -p retry-benches --bench durable -- --items "$items" --runs 3 --no-memory
fi
echo "$(uptime)"
