#!/usr/bin/env bash
# The whole test suite: unit, property, short fuzz seeds, end-to-end (built
# binary, real redis-server, real 3-node Redis Cluster, headless Chromium),
# with the race detector. Installs what the tests need from Debian's packages when missing.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need+=(redis-tools)
command -v redis-sentinel >/dev/null 2>&1 || need+=(redis-sentinel)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v curl >/dev/null 2>&1 || need+=(curl)   # the docs' examples, run as written
[ -x /usr/bin/chromium ] || need+=(chromium)   # the browser tests of examples/chat
command -v node >/dev/null 2>&1 || need+=(nodejs)  # the JS client's tests in Node.js
command -v npm >/dev/null 2>&1 || need+=(npm)      # TypeScript, for the JS client's type check
if [ ${#need[@]} -gt 0 ]; then
  echo "installing ${need[*]} from Debian's packages"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# The Debian packages start a system redis on 6379 (and a sentinel on
# 26379); the tests start their own on free ports and do not need them.

# Hygiene first, cheapest first: each check fails the run with a message
# that says what to do.
unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
  echo "gofmt -l lists files that need formatting (run gofmt -w on them):" >&2
  echo "$unformatted" >&2
  exit 1
fi
if ! tidy=$(go mod tidy -diff); then
  echo "go.mod/go.sum are not tidy (run go mod tidy):" >&2
  echo "$tidy" >&2
  exit 1
fi
# Notes kept while developing rtserver live outside the repository, and
# nothing a user reads may point at them: every rule is stated in docs/.
# The pattern is built from parts so that this check does not match itself.
devnotes="CONTR""ACT[.]md|CONTR""ACT section|[.][.]/sha""red"
if grep -rnIE --exclude-dir=.git -e "$devnotes" . >&2; then
  echo "the lines above point at development notes outside the repository: cite docs/ or state the rule in place" >&2
  exit 1
fi
go vet ./...
# The portable path (no socket calls of rtserver's own) must keep
# compiling where it is the only one.
GOOS=darwin go build ./...
GOOS=windows go vet ./...
# staticcheck is a tool dependency of the module (go.mod's tool line), so
# the module proxy supplies it at the pinned version; nothing to install.
go tool staticcheck ./...

# The JS client's TypeScript declarations: clients/js/typecheck/usage.ts,
# compiled with tsc --strict by the TypeScript that package-lock.json pins
# (npm ci fetches it into clients/js/node_modules, which git ignores).
# Without the npm registry this is skipped, saying so, unless the caller
# set RTSERVER_REQUIRE_INTEGRATION=1.
if npm ping --fetch-timeout=15000 --fetch-retries=1 >/dev/null 2>&1; then
  npm ci --prefix clients/js --no-audit --no-fund --loglevel=error >/dev/null
  npm run --prefix clients/js --silent typecheck
elif [ "${RTSERVER_REQUIRE_INTEGRATION:-}" = 1 ]; then
  echo "npm cannot reach its registry: the JS client's type check needs TypeScript from it" >&2
  exit 1
else
  echo "npm cannot reach its registry: skipping the JS client's type check (RTSERVER_REQUIRE_INTEGRATION=1 makes this a failure)" >&2
fi

# A test that needs redis-server, redis-cli, promtool or Chromium skips,
# naming the missing program, when run by hand without it; here it fails
# instead, so this suite never skips an integration test silently.
export RTSERVER_REQUIRE_INTEGRATION=1
# The server's tests once more with limits.portableSockets on for every
# server: both socket paths are asked the same behaviour (tests of what
# only the fast path does skip, saying so).
RTSERVER_PORTABLE_SOCKETS=1 go test -race -count=1 -timeout 30m "$@" ./server/
exec go test -race -count=1 -timeout 30m "$@" ./...
