#!/usr/bin/env bash
# Opens the HTML report the last `make demo` wrote in headless Chromium,
# fails if the page logs anything to the console or refers to anything
# outside itself, and writes a screenshot of the whole report. Installs
# chromium with apt-get where it is missing. Used by `make demo-screenshot`.
#
#   scripts/screenshot-report.sh [REPORT.html] [OUT.png]
#
# REPORT defaults to floodgate-demo-report.html (what `make demo` writes),
# OUT to the report's name with .png.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
report="${1:-$root/floodgate-demo-report.html}"
out="${2:-${report%.html}.png}"

if [ ! -s "$report" ]; then
	echo "screenshot-report: no report at $report; run \`make demo\` first (e.g. make demo DEMO_ARGS='--redis-fault kill@8s:4s')" >&2
	exit 1
fi
report="$(cd "$(dirname "$report")" && pwd)/$(basename "$report")"
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac

# The report is self-contained: nothing to load, so nothing may be fetched.
if grep -Eo '(src|href)="[^"]*"' "$report" | grep -v '="data:' >&2; then
	echo "screenshot-report: the report refers to resources outside itself" >&2
	exit 1
fi

if ! command -v chromium >/dev/null 2>&1; then
	echo "installing chromium"
	if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# Chromium screenshots its window, so the window is as tall as the report:
# the timeline SVG's own height plus room for the text around it.
svg_h="$(grep -o '<svg id="timeline"[^>]*' "$report" | grep -o 'height="[0-9]*"' | head -1 | tr -dc 0-9)"
height=$(( ${svg_h:-1400} + 1600 ))

# The flags keep Chromium off the network and out of any existing profile.
timeout 120 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
	--disable-background-networking --disable-component-update --disable-sync \
	--user-data-dir="$work/profile" --window-size="1100,$height" --hide-scrollbars \
	--enable-logging=stderr --v=0 \
	--screenshot="$out" "file://$report" 2>"$work/chromium.log" || {
	cat "$work/chromium.log" >&2
	echo "screenshot-report: chromium failed" >&2
	exit 1
}
if grep -E 'CONSOLE|Uncaught|Failed to load resource|ERR_' "$work/chromium.log" >&2; then
	echo "screenshot-report: the report logged errors in Chromium" >&2
	exit 1
fi
[ -s "$out" ] || { echo "screenshot-report: no screenshot written" >&2; exit 1; }
echo "report $report opened in Chromium without console errors; screenshot: $out"
