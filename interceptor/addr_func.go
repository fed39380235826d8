package interceptor

import (
	"context"
	"net/netip"
)

// withClientAddr takes the client address (Identity.IP) from addr, a
// function over the call's context, instead of resolving it from the peer
// and the forwarding header: how another middleware that already resolved
// the client, and runs before floodgate, hands its answer over. Module
// grpcmw reaches it through seam.WithClientAddr, for go-grpc-middleware
// v2's realip.FromContext (grpcmw.WithRealIP).
//
// When addr reports false or an invalid address (the other middleware did
// not run, or resolved nothing), the address is resolved as without this
// option: the peer, and the forwarding header only through
// WithTrustedProxies. The address addr returns is trusted as is; its zone
// is dropped and an IPv4-mapped address unmapped. A nil addr is a
// configuration error.
func withClientAddr(addr func(ctx context.Context) (netip.Addr, bool)) Option {
	return func(c *config) {
		c.builds = true
		if addr == nil {
			c.fail("client address func is nil")
			return
		}
		c.clientAddr = addr
	}
}

// resolveIP is the call's client address: from the withClientAddr func
// when it answers, else from the peer and the trusted forwarding header.
func (c *config) resolveIP(ctx context.Context, cl *call) netip.Addr {
	if c.clientAddr != nil {
		if a, ok := c.clientAddr(ctx); ok && a.IsValid() {
			return normalize(a)
		}
	}
	return c.clientIP(cl.peer(ctx), cl.md)
}
