package fleetconc_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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
// The order of events, not their timing, makes each case: the caller
// cancels the moment the acquire is written to Redis (a go-redis read
// ends only at a deadline, the cap's 300ms Timeout here, and the
// cancelled context then names the caller); a caller's deadline of 100ms
// always comes before the Timeout, which starts later. The test waits
// for Redis to run every acquire written during the stall before it
// looks for a slot.
func TestFleetCallerGoneIsDenied(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// stall pauses Redis while Admit runs.
		stall bool
		// cancelOnSend cancels the request's context once its acquire is
		// written to Redis.
		cancelOnSend bool
		// callerCtx returns the context the request is admitted with.
		callerCtx func() (context.Context, context.CancelFunc)
		want      error
	}{
		{"cancelled before Admit", false, false, func() (context.Context, context.CancelFunc) {
			c, cancel := context.WithCancel(ctx)
			cancel()
			return c, cancel
		}, context.Canceled},
		{"cancelled while Redis stalls", true, true, func() (context.Context, context.CancelFunc) {
			return context.WithCancel(ctx)
		}, context.Canceled},
		{"deadline passes while Redis stalls", true, false, func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(ctx, 100*time.Millisecond)
		}, context.DeadlineExceeded},
	} {
		for _, failClosed := range []bool{false, true} {
			name := tc.name + "/fail open"
			if failClosed {
				name = tc.name + "/fail closed"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				srv := redistest.Start(t)
				clk := clock.New(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
				mk := func(c redis.UniversalClient, timeout time.Duration) *instance {
					return newInstance(t, []concurrency.Option{concurrency.WithGlobal(10)}, fleetconc.WithClock(clk),
						fleetconc.WithPerKey(fleetconc.PerKey{
							Name: "fleet-user", Cap: 1, Key: byUser, Client: c,
							Lease: 30 * time.Second, Timeout: timeout, FailClosed: failClosed,
						}))
				}
				// a's only script call is the stalled one, on a
				// connection already open; b calls a healthy Redis.
				w := &sendWatch{}
				ca := w.client(t, srv)
				if err := ca.Ping(ctx).Err(); err != nil {
					t.Fatal(err)
				}
				a, b := mk(ca, 300*time.Millisecond), mk(srv.NewClient(), callTimeout)
				alice := req("/m", "", "alice")
				_, done := mustAdmit(t, b, alice) // loads the script
				done(floodgate.Result{})

				cctx, cancel := tc.callerCtx()
				defer cancel()
				if tc.cancelOnSend {
					w.onSend(cancel)
				}
				sent, ran := w.sent(), scriptCalls(t, srv)
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
				waitScriptCalls(t, srv, ran+w.sent()-sent) // Redis runs what was sent in the stall
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

// sendWatch counts the EVALSHA commands its client writes to Redis and,
// once told, calls a function right after the next one is written.
type sendWatch struct {
	n    atomic.Int64
	then atomic.Pointer[func()]
}

// client returns a client to srv (set up as srv.NewClient's) whose
// connections w watches.
func (w *sendWatch) client(t *testing.T, srv *redistest.Server) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:                  srv.Addr(),
		DialTimeout:           time.Second,
		ReadTimeout:           2 * time.Second,
		WriteTimeout:          2 * time.Second,
		MaxRetries:            1,
		ContextTimeoutEnabled: true,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var d net.Dialer
			conn, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return watchedConn{conn, w}, nil
		},
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// onSend makes w call f once, right after the next EVALSHA is written.
func (w *sendWatch) onSend(f func()) { w.then.Store(&f) }

// sent returns how many EVALSHA commands were written.
func (w *sendWatch) sent() int64 { return w.n.Load() }

type watchedConn struct {
	net.Conn
	w *sendWatch
}

func (c watchedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if err == nil && bytes.Contains(bytes.ToLower(p), []byte("evalsha")) {
		c.w.n.Add(1)
		if f := c.w.then.Swap(nil); f != nil {
			(*f)()
		}
	}
	return n, err
}

// Redis's own per-call timeout still takes the cap's fail mode when the
// caller's context is live, even when the caller has a deadline of its
// own (later than the Timeout).
func TestFleetTimeoutWithLiveCallerTakesFailMode(t *testing.T) {
	t.Parallel()
	for _, failClosed := range []bool{false, true} {
		srv := redistest.Start(t)
		l := newInstance(t, nil, fleetconc.WithPerKey(fleetconc.PerKey{
			Name: "fleet-user", Cap: 1, Key: byUser, Client: srv.NewClient(),
			Timeout: 100 * time.Millisecond, FailClosed: failClosed,
		}))
		// Another instance, on a healthy Redis, loads the script: l
		// calls Redis only while it stalls.
		warm := newInstance(t, nil, fleetconc.WithPerKey(fleetconc.PerKey{
			Name: "fleet-user", Cap: 1, Key: byUser, Client: srv.NewClient(), Timeout: callTimeout,
		}))
		alice := req("/m", "", "alice")
		_, done := mustAdmit(t, warm, alice)
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
