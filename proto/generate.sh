#!/usr/bin/env bash
# Regenerates the committed Go code of proto/floodgate/v1 and of every
# .proto under internal/ (the test service; the shop service of the demo
# and the examples module). Installs what it needs when missing: protoc
# (apt: protobuf-compiler) and the Go plugins at pinned versions.
# Used by `make proto`; run from anywhere.
set -euo pipefail

PROTOC_GEN_GO_VERSION=v1.36.12
PROTOC_GEN_GO_GRPC_VERSION=v1.5.1

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

if ! command -v protoc >/dev/null 2>&1; then
	echo "installing protoc (protobuf-compiler)"
	if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq protobuf-compiler >/dev/null
fi

gobin="$(go env GOPATH)/bin"
export PATH="$gobin:$PATH"
installed_version() { go version -m "$1" 2>/dev/null | awk '$1 == "mod" {print $3}'; }
if [ "$(installed_version "$gobin/protoc-gen-go")" != "$PROTOC_GEN_GO_VERSION" ]; then
	GOFLAGS= go install "google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOC_GEN_GO_VERSION"
fi
if [ "$(installed_version "$gobin/protoc-gen-go-grpc")" != "$PROTOC_GEN_GO_GRPC_VERSION" ]; then
	GOFLAGS= go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$PROTOC_GEN_GO_GRPC_VERSION"
fi

# descriptor.proto ships with protobuf-compiler's libprotobuf-dev.
include=/usr/include
[ -f "$include/google/protobuf/descriptor.proto" ] || { echo "generate.sh: google/protobuf/descriptor.proto not found under $include" >&2; exit 1; }

protoc -I proto -I "$include" \
	--go_out=. --go_opt=module=github.com/floodgate-go/floodgate \
	proto/floodgate/v1/annotations.proto

# Every other .proto under internal/ (the test service, the shop service)
# may import floodgate/v1/annotations.proto; each is registered
# under its path from the repository root.
while IFS= read -r f; do
	protoc -I . -I proto -I "$include" \
		--go_out=. --go_opt=module=github.com/floodgate-go/floodgate \
		--go-grpc_out=. --go-grpc_opt=module=github.com/floodgate-go/floodgate \
		"$f"
done < <(find internal -name '*.proto' | sort)

echo "generated proto/floodgate/v1 and every internal/**/*.proto"
