package interceptor

import (
	"context"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/seam"
)

// The seam for the nested modules of this repository (see package
// internal/seam): a Gate over an Interceptor and a Retrier with the client
// options for connectmw, the client address option for grpcmw.
func init() {
	seam.SetNewGate(func(i *Interceptor, a floodgate.Admitter) seam.Gate { return i.gate(a) })
	seam.SetNewRetrier(newRetrier)
	seam.SetWithClientAddr(withClientAddr)
}

// gate is the seam.Gate of an Interceptor: it admits the calls of a
// transport this package does not serve itself through one stage or
// floodgate.Chain, with the Interceptor's options, as UnaryServer and
// StreamServer admit gRPC calls.
type gate struct {
	i *Interceptor
	a floodgate.Admitter
}

// gate returns a gate admitting calls through a. It panics if a is nil,
// and with WithStrictIdentity if a rule of a stage's policy can never
// apply.
func (i *Interceptor) gate(a floodgate.Admitter) *gate {
	i.requireScopes(a, transportGRPC)
	return &gate{i: i, a: i.stage(a)}
}

// Admit implements seam.Gate.
func (g *gate) Admit(ctx context.Context, c seam.Call) (context.Context, floodgate.Done, *seam.Denial) {
	i := g.i
	if i.exempt(c.Method) {
		return ctx, nil, nil
	}
	r, ctx := i.request(ctx, &call{method: c.Method, grpcMethod: true, remoteAddr: c.RemoteAddr, md: Metadata{h: c.Header, msg: c.Message}})
	d, done := i.admit(g.a, ctx, r)
	if !d.Allowed {
		return ctx, nil, i.denial(ctx, d)
	}
	if d.Waited > 0 && c.ResponseHeader != nil {
		c.ResponseHeader(ctx).Add(serverTimingHeader, serverTiming(d.Waited))
	}
	if d.SoftExceeded != "" {
		softCall(ctx, c, r, d)
	}
	return ctx, done, nil
}

// AdmitMessage implements seam.Gate.
func (g *gate) AdmitMessage(ctx context.Context) *seam.Denial {
	if !g.i.c.perMessage {
		return nil
	}
	r, ok := floodgate.FromContext(ctx)
	if !ok {
		return nil
	}
	ctx = seam.WithStreamMessage(ctx)
	d, done := g.i.admit(g.a, ctx, r)
	if !d.Allowed {
		return g.i.denial(ctx, d)
	}
	if done != nil {
		done(floodgate.Result{Outcome: floodgate.OutcomeIgnored})
	}
	return nil
}

// softCall marks an admitted call that went over soft limits, as softMD
// does a gRPC call's: on its Request (for the handler) and in its
// response header, when c says where that is.
func softCall(ctx context.Context, c seam.Call, r *floodgate.Request, d floodgate.Decision) {
	if markSoft(r, &d) && c.ResponseHeader != nil {
		if v := softValue(d.SoftExceeded); v != "" {
			c.ResponseHeader(ctx)[softHeader] = []string{v}
		}
	}
}
