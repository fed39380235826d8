package fleetconc_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/concurrency/fleetconc"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/redistest"
)

// A request whose own context ends before Redis answers is denied with the
// context's error, whether the cap fails open or closed: failing open
// would admit a request whose caller has gone. A slot Redis adds for it
// after a stall is removed, so the key is free again on every instance.
func TestFleetCallerGoneIsDenied(t *testing.T) {
	for _, tc := range []struct {
		name string
		// stall pauses Redis while Admit runs.
		stall bool
		// callerCtx returns the context the request is admitted with.
		callerCtx func() (context.Context, context.CancelFunc)
		want      error
	}{
		{"cancelled before Admit", false, func() (context.Context, context.CancelFunc) {
			c, cancel := context.WithCancel(ctx)
			cancel()
			return c, cancel
		}, context.Canceled},
		{"cancelled while Redis stalls", true, func() (context.Context, context.CancelFunc) {
			c, cancel := context.WithCancel(ctx)
			time.AfterFunc(50*time.Millisecond, cancel)
			return c, cancel
		}, context.Canceled},
		{"deadline passes while Redis stalls", true, func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(ctx, 100*time.Millisecond)
		}, context.DeadlineExceeded},
	} {
		for _, failClosed := range []bool{false, true} {
			name := tc.name + "/fail open"
			if failClosed {
				name = tc.name + "/fail closed"
			}
			t.Run(name, func(t *testing.T) {
				srv := redistest.Start(t)
				clk := clock.New(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
				mk := func() *instance {
					return newInstance(t, []concurrency.Option{concurrency.WithGlobal(10)}, fleetconc.WithClock(clk),
						fleetconc.WithPerKey(fleetconc.PerKey{
							Name: "fleet-user", Cap: 1, Key: byUser, Client: srv.NewClient(),
							// Longer than the caller waits: the caller's
							// context, not the Timeout, ends the call.
							Lease: 30 * time.Second, Timeout: 300 * time.Millisecond, FailClosed: failClosed,
						}))
				}
				a, b := mk(), mk()
				alice := req("/m", "", "alice")
				_, done := mustAdmit(t, a, alice) // loads the script
				done(floodgate.Result{})

				cctx, cancel := tc.callerCtx()
				defer cancel()
				if tc.stall {
					srv.Pause()
				}
				start := time.Now()
				d, done, err := a.Admit(cctx, alice)
				took := time.Since(start)
				if tc.stall {
					srv.Resume()
				}
				if done != nil {
					done(floodgate.Ignored)
				}
				if d.Allowed || done != nil || d.Source != floodgate.SourceConcurrency || d.Policy != "fleet-user" || !errors.Is(err, tc.want) {
					t.Fatalf("caller gone: %+v, done nil=%v, %v (after %s); want denied from concurrency naming fleet-user, with %v",
						d, done == nil, err, took, tc.want)
				}
				if a.InFlight() != 0 {
					t.Errorf("global in flight %d after the deny, want 0", a.InFlight())
				}
				if tc.stall {
					time.Sleep(200 * time.Millisecond) // Redis runs the stalled acquire
				}
				if n := waitFleetCount(t, a, 0); n != 0 {
					t.Errorf("alice's fleet count = %d after her only request was denied, want 0 (a slot held by no request)", n)
				}
				if d, dn, err := b.Admit(ctx, alice); !d.Allowed {
					t.Errorf("with nothing in flight, instance b is denied alice: %+v, %v", d, err)
				} else if dn != nil {
					dn(floodgate.Result{})
				}
			})
		}
	}
}

// Redis's own per-call timeout still takes the cap's fail mode when the
// caller's context is live, even when the caller has a deadline of its
// own (later than the Timeout).
func TestFleetTimeoutWithLiveCallerTakesFailMode(t *testing.T) {
	for _, failClosed := range []bool{false, true} {
		srv := redistest.Start(t)
		l := newInstance(t, nil, fleetconc.WithPerKey(fleetconc.PerKey{
			Name: "fleet-user", Cap: 1, Key: byUser, Client: srv.NewClient(),
			Timeout: 100 * time.Millisecond, FailClosed: failClosed,
		}))
		alice := req("/m", "", "alice")
		_, done := mustAdmit(t, l, alice) // loads the script
		done(floodgate.Result{})

		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		srv.Pause()
		d, done, err := l.Admit(cctx, alice)
		srv.Resume()
		cancel()
		want := floodgate.SourceFailOpen
		if failClosed {
			want = floodgate.SourceFailClosed
		}
		if d.Allowed == failClosed || d.Source != want || err == nil || errors.Is(err, context.Canceled) {
			t.Errorf("failClosed %v, Redis timed out, caller live: %+v, %v; want source %s with the timeout's error", failClosed, d, err, want)
		}
		if done != nil {
			done(floodgate.Result{})
		}
	}
}
