package guard

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"google.golang.org/grpc"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/cooldown"
	"github.com/floodgate-go/floodgate/internal/cooldown/redisboard"
	"github.com/floodgate-go/floodgate/policyfile"
	"github.com/floodgate-go/floodgate/tiers"
)

// outboundKeyPrefix is the tiers key prefix of the outbound rules'
// buckets, so that an outbound rule never shares a bucket with an inbound
// rule of the same name.
const outboundKeyPrefix = "fg:out:"

// newOutbound builds the outbound stages: the cooldown (its board the
// Redis of the store stack, or this process) and the outbound rate limits
// over the same store stack as the inbound ones.
func (g *Guard) newOutbound(file *policyfile.File, st *stores) error {
	lim, err := tiers.NewLimiter(st.store, file.OutboundLimits(), tiers.WithKeyPrefix(outboundKeyPrefix))
	if err != nil {
		return fmt.Errorf("guard: outbound rate limits: %w", err)
	}
	var board cooldown.Board = cooldown.NewMemory()
	if st.client != nil {
		rb, err := redisboard.New(st.client, g.c.keyPrefix, nil)
		if err != nil {
			return fmt.Errorf("guard: outbound cooldown: %w", err)
		}
		board = rb
	}
	g.cooldown = cooldown.New(board, nil, g.c.logger)
	g.setCooldown(file)
	g.outLimiter = lim
	g.outbound = floodgate.Chain{g.cooldown, lim}
	return nil
}

// setCooldown applies the file's outbound: cooldown: settings; a file
// without an outbound: section starts no cooldown.
func (g *Guard) setCooldown(f *policyfile.File) {
	if f.Outbound == nil {
		g.cooldown.Set(nil)
		return
	}
	g.cooldown.Set(&cooldown.Config{Default: f.CooldownDefault, Max: f.CooldownMax, Sync: cooldownSync(f)})
}

func cooldownSync(f *policyfile.File) time.Duration {
	if f.CooldownSync > 0 {
		return f.CooldownSync
	}
	return cooldown.DefaultSync
}

// RoundTripper returns base (http.DefaultTransport when nil) behind the
// policy's outbound: section, for an http.Client calling a third party:
//
//	vendor := &http.Client{Transport: g.RoundTripper(nil)}
//
// Every request is described as "/HOST/PATH" (an outbound rule matches
// it with match: {method: "/api.vendor.com/v1/*"}) and charged to the
// outbound rules in the same store as the inbound ones, so a rule of 50/1s
// holds for the whole fleet; a rule's max_wait holds the request until
// its turn (within its context's deadline), and a refused request is not
// sent: the error (wrapped in the client's *url.Error) is
// RESOURCE_EXHAUSTED with RetryInfo for status.FromError, and
// interceptor.IsClientThrottled reports true for it.
//
// When the peer answers 429 or 503 with Retry-After, or 429 without
// (outbound: cooldown: default, 1s unless set), every replica stops
// sending to that host until the delay ends (capped by cooldown: max, 1m):
// the cooldown is shared through the same Redis, and a replica learns of
// another's within cooldown: sync (100ms) at the cost of one GET per host
// per sync, not per request. Requests during a cooldown are refused as
// above, with the time left. A policy without an outbound: section sends
// every request straight to base, untouched by the outbound stages (and
// unrecorded by their telemetry); a reload that adds the section applies
// it from the next request.
func (g *Guard) RoundTripper(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &outboundTransport{g: g, admitted: g.ic.RoundTripper(g.outbound, base), base: base}
}

// OutboundLimiter returns the rate-limit stage of outgoing calls (the
// policy's outbound: section), for what it can tell (Policy, Inspect).
func (g *Guard) OutboundLimiter() *tiers.Limiter { return g.outLimiter }

// outboundDialOptions are DialOptions' outbound interceptors, after the
// retrying ones so that each attempt is admitted.
func (g *Guard) outboundDialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(g.unaryOutbound()),
		grpc.WithChainStreamInterceptor(g.streamOutbound()),
	}
}

// outboundIdle reports whether the outbound stages would let every call
// through untouched, as they do under a policy without an outbound:
// section (the cooldown off, no outbound rule). The interceptors and the
// RoundTripper then send the call at once, without describing it to the
// stages: a service that dials through DialOptions pays for the outbound
// stages only once its policy has them (it paid 2.7 µs and 7
// allocations per call before). Both are read per call, so a reload that
// adds or removes the section takes effect at the next call.
func (g *Guard) outboundIdle() bool {
	return !g.cooldown.On() && len(g.outLimiter.Policy().Rules) == 0
}

// unaryOutbound is the unary interceptor of the outbound stages.
func (g *Guard) unaryOutbound() grpc.UnaryClientInterceptor {
	admit := g.ic.UnaryOutbound(g.outbound)
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if g.outboundIdle() {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		return admit(ctx, method, req, reply, cc, invoker, opts...)
	}
}

// streamOutbound is the stream interceptor of the outbound stages.
func (g *Guard) streamOutbound() grpc.StreamClientInterceptor {
	admit := g.ic.StreamOutbound(g.outbound)
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if g.outboundIdle() {
			return streamer(ctx, desc, cc, method, opts...)
		}
		return admit(ctx, desc, cc, method, streamer, opts...)
	}
}

// outboundTransport is RoundTripper's http.RoundTripper: base itself
// while the outbound stages are idle, else admitted (the interceptor's
// RoundTripper over the same base).
type outboundTransport struct {
	g        *Guard
	admitted http.RoundTripper
	base     http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (t *outboundTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.g.outboundIdle() {
		return t.base.RoundTrip(req)
	}
	return t.admitted.RoundTrip(req)
}

// CloseIdleConnections closes base's idle connections, if it keeps any
// (http.Client.CloseIdleConnections calls it).
func (t *outboundTransport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
