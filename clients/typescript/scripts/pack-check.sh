#!/usr/bin/env bash
# Pack @memevo/client as a registry would ship it, install the tarball into a scratch project in a
# temporary directory, compile scripts/consumer/agent.ts there with tsc against the installed types,
# and run it against a live sidecar (python with memevo installed: $MEMEVO_PYTHON, else python).
# The scratch install takes the package's dependencies, typescript and @types/node at the versions
# package-lock.json pins, from the npm cache when they are there (`npm ci` here fills it).
#
#   clients/typescript/scripts/pack-check.sh
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
scratch="$(mktemp -d "${TMPDIR:-/tmp}/memevo-pack-XXXXXX")"
trap 'rm -rf "$scratch"' EXIT

echo "-- npm pack (prepack builds dist/)"
tarball="$(cd "$here" && npm pack --silent --pack-destination "$scratch" | tail -n 1)"
tarball="$scratch/$tarball"
listing="$(tar -tzf "$tarball")"
for required in package/package.json package/dist/index.js package/dist/index.d.ts package/dist/client.js package/dist/sidecar.js; do
    if ! grep -qx "$required" <<<"$listing"; then
        echo "the tarball lacks $required:" >&2
        echo "$listing" >&2
        exit 1
    fi
done
if stray="$(grep -Ev '^package/(dist|src)/|^package/(package\.json|README\.md)$' <<<"$listing")"; then
    echo "the tarball ships files outside dist/ and src/:" >&2
    echo "$stray" >&2
    exit 1
fi
echo "$(wc -l <<<"$listing") files in $(basename "$tarball")"

echo "-- install the tarball into a scratch project"
pinned() { # the version package-lock.json pins for a package
    node -e 'const lock = require(process.argv[1]); console.log(lock.packages["node_modules/" + process.argv[2]].version)' \
        "$here/package-lock.json" "$1"
}
consumer="$scratch/consumer"
mkdir "$consumer"
cp "$here/scripts/consumer/agent.ts" "$consumer/"
cat >"$consumer/package.json" <<'JSON'
{ "name": "memevo-pack-check", "private": true, "type": "module" }
JSON
cat >"$consumer/tsconfig.json" <<'JSON'
{
  "compilerOptions": {
    "target": "ES2022",
    "module": "NodeNext",
    "moduleResolution": "NodeNext",
    "types": ["node"],
    "strict": true,
    "skipLibCheck": true,
    "outDir": "out"
  },
  "files": ["agent.ts"]
}
JSON
(cd "$consumer" && npm install --prefer-offline --no-audit --no-fund --loglevel=error --no-package-lock \
    "$tarball" "typescript@$(pinned typescript)" "@types/node@$(pinned @types/node)")

echo "-- compile the agent against the installed package's types, run it against a live sidecar"
(cd "$consumer" && npx --no-install tsc -p tsconfig.json && node out/agent.js)
