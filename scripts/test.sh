#!/usr/bin/env bash
# scripts/test.sh TIER: runs one tier of floodgate's tests in every module
# (the root module and each nested go.mod). The Makefile's test targets call
# it; CONTRIBUTING.md ("Two tiers of tests") says which tier a test belongs to.
#
#   fast    go test ./... in every module: the fast tier, plus every
#           benchmark once (-benchtime=1x) so none rots unexecuted.
#   race    the fast tier under the race detector (make test).
#
# race, alloc and system run go test with -vet=off: the Makefile runs each
# after `make vet`, which checks the same files with every analyzer.
#   alloc   the allocation tests (names containing Alloc, TestSkippedRules)
#           without the race detector, in the packages that have them only:
#           under -race, sync.Pool drops items at random and they skip.
#   system  the system tier: every Test in a *_system_test.go file (build
#           tag `system`), one package at a time (-p 1), under -race.
#   check   that every *_system_test.go file carries the tag and no other
#           file does.
#   lint    staticcheck over every module ($STATICCHECK, GOFLAGS=$CHECKFLAGS).
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
STATICCHECK=${STATICCHECK:-staticcheck}
CHECKFLAGS=${CHECKFLAGS:-${GOFLAGS:-} -race}
# The race detector sleeps a second at every test binary's exit, waiting for
# reports from goroutines still running; every test here ends its goroutines
# before it returns (its cleanups wait for them), so the wait buys nothing.
export GORACE=${GORACE:-atexit_sleep_ms=0}

modules() {
	echo .
	find . -mindepth 2 -name go.mod -not -path './.cache/*' -exec dirname {} \; | sort
}

# files lists the module's test files (relative to the module) matching
# grep -l "$1", leaving out nested modules.
files() {
	local pattern=$1 nested
	nested=$(find . -mindepth 2 -name go.mod -exec dirname {} \; | sed 's#^\./##')
	{ grep -rlE --include='*_test.go' "$pattern" . 2>/dev/null || true; } | sed 's#^\./##' | while IFS= read -r f; do
		local skip=
		for n in $nested; do
			if [[ $f == "$n"/* ]]; then skip=1; fi
		done
		if [[ -z $skip ]]; then echo "$f"; fi
	done | sort
}

check() {
	local bad=0
	while IFS= read -r f; do
		if [[ $(head -n 1 "$f") != "//go:build system" ]]; then
			echo "$f: a *_system_test.go file must start with //go:build system" >&2
			bad=1
		fi
	done < <(find . -name '*_system_test.go' -not -path './.cache/*')
	while IFS= read -r f; do
		if [[ $f != *_system_test.go ]]; then
			echo "$f: only *_system_test.go files carry the system tag" >&2
			bad=1
		fi
	done < <(grep -rl --include='*.go' '^//go:build.*\bsystem\b' . | grep -v '^\./\.cache/' || true)
	return $bad
}

fast() {
	fast_in "$(modules)" "$@"
}

# fast_in MODULES ARGS...: the fast tier in the modules listed (one word
# each), go test given ARGS.
fast_in() {
	local ms=$1
	shift
	for m in $ms; do
		echo "== go test $* ($m)"
		(cd "$m" && $GO test "$@" -bench=. -benchtime=1x ./...) || return
	done
}

# lint runs staticcheck ($STATICCHECK, with GOFLAGS=$CHECKFLAGS) over every
# module, the system tier's files too.
lint() {
	for m in $(modules); do
		echo "== staticcheck ($m)"
		(cd "$m" && GOFLAGS=$CHECKFLAGS $STATICCHECK -tags system ./...) || return
	done
}


alloc() {
	for m in $(modules); do
		local dirs
		dirs=$(cd "$m" && files '^func (Test[A-Za-z0-9_]*Alloc[A-Za-z0-9_]*|TestSkippedRules)\(' | xargs -r -n 1 dirname | sort -u | sed 's#^#./#')
		[[ -z $dirs ]] && continue
		echo "== allocation tests without -race ($m)"
		# shellcheck disable=SC2086
		(cd "$m" && $GO test -count=1 -vet=off -run 'Alloc|TestSkippedRules' $dirs) || return
	done
}

system() {
	check
	for m in $(modules); do
		local dirs
		dirs=$(cd "$m" && files '^//go:build system' | { grep '_system_test\.go$' || true; } | xargs -r -n 1 dirname | sort -u)
		for d in $dirs; do
			local names
			names=$(cd "$m/$d" && grep -ho '^func Test[A-Za-z0-9_]*(' ./*_system_test.go | sed 's/^func //; s/($//' | { grep -vx TestMain || true; } | sort -u | paste -sd '|' -)
			[[ -z $names ]] && continue
			echo "== system tier ($m/$d): $names" | sed 's#/\./#/#; s#(\./#(#'
			(cd "$m" && $GO test -race -count=1 -vet=off -p 1 -timeout 15m -tags system -run "^($names)\$" "./$d") || return
		done
	done
}

case ${1:-} in
fast) shift; fast "$@" ;;
race) shift; fast -race -count=1 -vet=off "$@" ;;
alloc) alloc ;;
system) system ;;
check) check ;;
lint) lint ;;
*)
	echo "usage: scripts/test.sh fast|race|alloc|system|check|lint" >&2
	exit 2
	;;
esac
