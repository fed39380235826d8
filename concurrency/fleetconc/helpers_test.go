package fleetconc_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/concurrency/fleetconc"
)

var ctx = context.Background()

// callTimeout is the Timeout of a fleet cap on a healthy Redis in these
// tests: one no call comes near on a loaded machine (a call under load
// takes tens of milliseconds), so that only a fault the test makes sends
// a request to the cap's fail mode.
const callTimeout = 10 * time.Second

func byUser(r *floodgate.Request) (string, bool) { return r.Identity.User, true }

func byTenant(r *floodgate.Request) (string, bool) { return r.Identity.Tenant, true }

func req(method, tenant, user string) *floodgate.Request {
	return &floodgate.Request{Method: method, Identity: floodgate.Identity{Tenant: tenant, User: user}}
}

// instance is one instance of a service as it chains the stages: its
// local concurrency.Limiter, when it has local caps, before its fleet
// caps.
type instance struct {
	floodgate.Chain
	local *concurrency.Limiter // nil without local caps
	fleet *fleetconc.Limiter
}

// InFlight returns the requests in flight under the local global cap.
func (i *instance) InFlight() int64 { return i.local.InFlight() }

// newInstance chains a Limiter built with local (none: no local stage)
// before a fleetconc.Limiter built with opts.
func newInstance(t *testing.T, local []concurrency.Option, opts ...fleetconc.Option) *instance {
	t.Helper()
	f, err := fleetconc.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	i := &instance{fleet: f, Chain: floodgate.Chain{f}}
	if len(local) > 0 {
		l, err := concurrency.New(local...)
		if err != nil {
			t.Fatal(err)
		}
		i.local, i.Chain = l, floodgate.Chain{l, f}
	}
	return i
}

func mustAdmit(t *testing.T, a floodgate.Admitter, r *floodgate.Request) (floodgate.Decision, floodgate.Done) {
	t.Helper()
	d, done, err := a.Admit(ctx, r)
	if err != nil || !d.Allowed || done == nil {
		t.Fatalf("Admit(%s %s/%s) = %+v, done nil=%v, %v; want allowed", r.Method, r.Identity.Tenant, r.Identity.User, d, done == nil, err)
	}
	return d, done
}

func mustDeny(t *testing.T, a floodgate.Admitter, r *floodgate.Request) (floodgate.Decision, error) {
	t.Helper()
	d, done, err := a.Admit(ctx, r)
	if d.Allowed || done != nil {
		t.Fatalf("Admit(%s %s/%s) = %+v, done nil=%v; want denied", r.Method, r.Identity.Tenant, r.Identity.User, d, done == nil)
	}
	return d, err
}

// outcomes counts what became of a storm's requests.
type outcomes struct{ served, denied, panics, cancels, errs atomic.Int64 }

// stormSize is the number of requests a storm sends.
const stormSize = 8 * 1250

// storm sends stormSize requests from 8 goroutines: request n of worker w
// goes to the Admitter pick returns and, if admitted, ends by return, panic
// or cancellation (n % 3), with its Done deferred as the transports do.
func storm(pick func(w, n int) (floodgate.Admitter, *floodgate.Request)) *outcomes {
	var o outcomes
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range stormSize / 8 {
				n := w*stormSize/8 + i
				l, r := pick(w, n)
				rctx, cancel := context.WithCancel(ctx)
				func() {
					defer func() {
						if recover() != nil {
							o.panics.Add(1)
						}
					}()
					d, done, err := l.Admit(rctx, r)
					if err != nil {
						o.errs.Add(1)
					}
					if !d.Allowed {
						o.denied.Add(1)
						return
					}
					o.served.Add(1)
					defer done(floodgate.Result{})
					switch n % 3 {
					case 1:
						panic("handler panics")
					case 2:
						cancel()
						<-rctx.Done()
						o.cancels.Add(1)
					}
				}()
				cancel()
			}
		})
	}
	wg.Wait()
	return &o
}
