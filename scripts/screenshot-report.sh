#!/usr/bin/env bash
# Runs a short demo, opens its HTML report in headless Chromium, fails if the
# page logs a console error, and writes a screenshot. Installs chromium with
# apt-get where it is missing. Used by `make demo-screenshot`.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/floodgate-demo-report.png}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

if ! command -v chromium >/dev/null 2>&1; then
	echo "installing chromium"
	if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi

(cd "$root" && go run ./cmd/floodgate demo -duration "${DEMO_DURATION:-8s}" -report "$work/report.html" >/dev/null)

# The flags keep Chromium off the network: the report is self-contained.
chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
	--disable-background-networking --disable-component-update --disable-sync \
	--user-data-dir="$work/profile" --window-size=1100,1400 \
	--enable-logging=stderr --v=0 \
	--screenshot="$out" "file://$work/report.html" 2>"$work/chromium.log" || {
	cat "$work/chromium.log" >&2
	exit 1
}
if grep -E 'CONSOLE|Uncaught|Failed to load resource' "$work/chromium.log" >&2; then
	echo "screenshot-report: the report logged errors in Chromium" >&2
	exit 1
fi
[ -s "$out" ] || { echo "screenshot-report: no screenshot written" >&2; exit 1; }
echo "report opened without errors; screenshot: $out"
