package interceptor

import (
	"context"
	"net/http"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/floodgate-go/floodgate"
)

// softHeader is the HTTP response header, and softKey the gRPC response
// metadata key, that mark an admitted call that went over soft rate
// limits (floodgate.Decision.SoftExceeded; package tiers, soft: true):
// an RFC 9651 List of Strings naming them, as RateLimit-Policy names
// policies:
//
//	X-RateLimit-Soft-Exceeded: "plan", "burst"
//
// Nothing is sent for a call within every soft limit, nor for a denied
// one.
const (
	softHeader = "X-Ratelimit-Soft-Exceeded" // canonical form of X-RateLimit-Soft-Exceeded
	softKey    = "x-ratelimit-soft-exceeded"
)

// softValue is the field value naming the soft limits of names
// (comma-separated, as Decision.SoftExceeded), or "" when one cannot be
// an RFC 9651 String (policy names are [A-Za-z0-9_.-/], so it can).
func softValue(names string) string {
	buf := make([]byte, 0, len(names)+8)
	for n := range strings.SplitSeq(names, ",") {
		if !validSFString(n) {
			return ""
		}
		if len(buf) > 0 {
			buf = append(buf, ", "...)
		}
		buf = appendSFString(buf, n)
	}
	return string(buf)
}

// markSoft records on the call's Request what soft limits an admitted
// call went over (floodgate.Request.SoftExceeded, for the handler), and
// reports whether it went over any.
func markSoft(r *floodgate.Request, d *floodgate.Decision) bool {
	if d.SoftExceeded == "" {
		return false
	}
	r.SoftExceeded = d.SoftExceeded
	return true
}

// softHTTP marks an admitted HTTP call that went over soft limits.
func softHTTP(w http.ResponseWriter, r *floodgate.Request, d floodgate.Decision) {
	if markSoft(r, &d) {
		if v := softValue(d.SoftExceeded); v != "" {
			w.Header()[softHeader] = []string{v}
		}
	}
}

// softMD marks an admitted unary gRPC call that went over soft limits,
// in its response headers.
func softMD(ctx context.Context, r *floodgate.Request, d floodgate.Decision) {
	if markSoft(r, &d) {
		if v := softValue(d.SoftExceeded); v != "" {
			_ = grpc.SetHeader(ctx, metadata.Pairs(softKey, v))
		}
	}
}

// softStreamMD is softMD for a stream.
func softStreamMD(ss grpc.ServerStream, r *floodgate.Request, d floodgate.Decision) {
	if markSoft(r, &d) {
		if v := softValue(d.SoftExceeded); v != "" {
			_ = ss.SetHeader(metadata.Pairs(softKey, v))
		}
	}
}
