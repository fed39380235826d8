package interceptor

import (
	"context"
	"net/netip"
)

// WithClientAddr takes the client address (Identity.IP) from addr, a
// function over the call's context, instead of resolving it from the peer
// and the forwarding header. It is how another middleware that already
// resolved the client, and runs before floodgate, hands its answer over:
// go-grpc-middleware v2's realip.FromContext has this signature (module
// github.com/floodgate-go/floodgate/grpcmw wraps it as grpcmw.WithRealIP).
//
// When addr reports false or an invalid address (the other middleware did
// not run, or resolved nothing), the address is resolved as without this
// option: the peer, and the forwarding header only through
// WithTrustedProxies. The address addr returns is trusted as is; its zone
// is dropped and an IPv4-mapped address unmapped. A nil addr is a
// configuration error.
func WithClientAddr(addr func(ctx context.Context) (netip.Addr, bool)) Option {
	return func(c *config) {
		c.builds = true
		if addr == nil {
			c.fail("WithClientAddr: nil func")
			return
		}
		c.clientAddr = addr
	}
}

// resolveIP is the call's client address: from the WithClientAddr func
// when it answers, else from the peer and the trusted forwarding header.
func (c *config) resolveIP(ctx context.Context, cl *call) netip.Addr {
	if c.clientAddr != nil {
		if a, ok := c.clientAddr(ctx); ok && a.IsValid() {
			return normalize(a)
		}
	}
	return c.clientIP(cl.peer(ctx), cl.md)
}
