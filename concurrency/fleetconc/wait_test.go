package fleetconc_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/concurrency/fleetconc"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/redistest"
)

// waitingFleet is an instance with a fleet cap of 1 per user (its Timeout
// callTimeout) that waits as w says, on clk.
func waitingFleet(t *testing.T, c redis.UniversalClient, clk *clock.Fake, w concurrency.Wait) *fleetconc.Limiter {
	t.Helper()
	l, err := fleetconc.New(fleetconc.WithPerKey(fleetconc.PerKey{Name: "fleet-user", Cap: 1, Key: byUser, Client: c, Lease: lease, Timeout: callTimeout}),
		fleetconc.WithClock(clk), fleetconc.WithWait(w))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

type result struct {
	name string
	d    floodgate.Decision
	done floodgate.Done
	err  error
}

// startWaiting admits r in a goroutine and returns once want requests
// wait on l.
func startWaiting(t *testing.T, l *fleetconc.Limiter, c context.Context, r *floodgate.Request, name string, want int, out chan<- result) {
	t.Helper()
	go func() {
		d, done, err := l.Admit(c, r)
		out <- result{name, d, done, err}
	}()
	poll(t, func() bool { return l.Waiting() == want }, "%d waiting", want)
}

func poll(t *testing.T, cond func() bool, format string, args ...any) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for "+format, args...)
		}
	}
}

func next(t *testing.T, out <-chan result) result {
	t.Helper()
	select {
	case r := <-out:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("no result within 5s")
		return result{}
	}
}

func quiet(t *testing.T, out <-chan result) {
	t.Helper()
	select {
	case r := <-out:
		t.Fatalf("%s returned early: %+v, %v", r.name, r.d, r.err)
	case <-time.After(30 * time.Millisecond):
	}
}

func prio(p floodgate.Priority) *floodgate.Request {
	r := req("/m", "acme", "alice")
	r.Priority = p
	return r
}

// TestFleetWaitOrder: on one instance, a fleet slot this instance frees
// goes to the waiting request the order picks: highest priority first,
// then the oldest (FIFO) or newest (LIFO). Poll timers are on the fake
// clock and never fire, so only the releases admit.
func TestFleetWaitOrder(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	R, C := floodgate.PriorityRead, floodgate.PriorityCritical
	joins := []struct {
		name string
		p    floodgate.Priority
	}{{"r1", R}, {"r2", R}, {"c1", C}, {"r3", R}, {"c2", C}}
	for _, tc := range []struct {
		order concurrency.WaitOrder
		want  string
	}{{concurrency.FIFO, "c1 c2 r1 r2 r3"}, {concurrency.LIFO, "c2 c1 r3 r2 r1"}} {
		t.Run(tc.order.String(), func(t *testing.T) {
			srv.FlushAll()
			clk := clock.New(time.Time{})
			l := waitingFleet(t, srv.NewClient(), clk, concurrency.Wait{Max: time.Hour, Order: tc.order})
			_, done := mustAdmit(t, l, prio(R))
			out := make(chan result, len(joins))
			for i, j := range joins {
				startWaiting(t, l, ctx, prio(j.p), j.name, i+1, out)
			}
			var got []string
			for range joins {
				done(floodgate.Result{})
				r := next(t, out)
				if !r.d.Allowed || r.err != nil {
					t.Fatalf("%s: %+v %v", r.name, r.d, r.err)
				}
				got = append(got, r.name)
				done = r.done
			}
			done(floodgate.Result{})
			if g := strings.Join(got, " "); g != tc.want {
				t.Fatalf("admitted in order %q, want %q", g, tc.want)
			}
		})
	}
}

// TestFleetWaitAcrossInstances: a slot freed by another instance is found
// by the waiting request's poll: not before its first poll is due on the
// clock, and at it.
func TestFleetWaitAcrossInstances(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	clk := clock.New(time.Time{})
	a := waitingFleet(t, srv.NewClient(), clk, concurrency.Wait{})
	b := waitingFleet(t, srv.NewClient(), clk, concurrency.Wait{Max: time.Hour})
	_, done := mustAdmit(t, a, req("/m", "acme", "alice"))
	out := make(chan result, 1)
	startWaiting(t, b, ctx, req("/m", "acme", "alice"), "b", 1, out)
	poll(t, func() bool { return clk.Timers() == 2 }, "the wait's deadline and first poll timers")
	done(floodgate.Result{}) // on a: b is not told
	quiet(t, out)
	clk.Advance(4 * time.Millisecond)
	quiet(t, out)
	clk.Advance(time.Millisecond) // the first poll (5ms)
	r := next(t, out)
	if !r.d.Allowed || r.err != nil || r.d.Policy != "fleet-user" {
		t.Fatalf("b after a's release and a poll: %+v %v", r.d, r.err)
	}
	r.done(floodgate.Result{})
}

// TestFleetWaitDeadline: a request waits exactly Max on the clock, then is
// denied by the full cap with no error.
func TestFleetWaitDeadline(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	clk := clock.New(time.Time{})
	l := waitingFleet(t, srv.NewClient(), clk, concurrency.Wait{Max: 3 * time.Millisecond})
	_, done := mustAdmit(t, l, req("/m", "acme", "alice"))
	defer done(floodgate.Result{})
	out := make(chan result, 1)
	startWaiting(t, l, ctx, req("/m", "acme", "alice"), "w", 1, out)
	poll(t, func() bool { return clk.Timers() == 2 }, "timers")
	clk.Advance(2 * time.Millisecond)
	quiet(t, out)
	clk.Advance(time.Millisecond)
	r := next(t, out)
	if r.d.Allowed || r.err != nil || r.d.Policy != "fleet-user" || r.d.RetryAfter != concurrency.DefaultRetryAfter || l.Waiting() != 0 {
		t.Fatalf("after Max: %+v %v, %d waiting", r.d, r.err, l.Waiting())
	}
}

// TestFleetWaitQueueAndCancel: with a queue of one a second request is
// denied at once; cancelling the waiting one denies it with the
// context's error and RetryAfter 0 and frees its place.
func TestFleetWaitQueueAndCancel(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	clk := clock.New(time.Time{})
	l := waitingFleet(t, srv.NewClient(), clk, concurrency.Wait{Max: time.Hour, Queue: 1})
	_, done := mustAdmit(t, l, req("/m", "acme", "alice"))
	cctx, cancel := context.WithCancel(ctx)
	out := make(chan result, 2)
	startWaiting(t, l, cctx, req("/m", "acme", "alice"), "a", 1, out)
	if d, err := mustDeny(t, l, req("/m", "acme", "alice")); err != nil || d.Policy != "fleet-user" {
		t.Fatalf("with the queue full: %+v %v", d, err)
	}
	cancel()
	r := next(t, out)
	if r.d.Allowed || !errors.Is(r.err, context.Canceled) || r.d.RetryAfter != 0 || l.Waiting() != 0 {
		t.Fatalf("cancelled: %+v %v, %d waiting", r.d, r.err, l.Waiting())
	}
	startWaiting(t, l, ctx, req("/m", "acme", "alice"), "c", 1, out)
	done(floodgate.Result{})
	if r := next(t, out); r.name != "c" || !r.d.Allowed {
		t.Fatalf("c: %+v %v", r.d, r.err)
	} else {
		r.done(floodgate.Result{})
	}
	if n, err := l.FleetInFlight(ctx, "fleet-user", "alice"); err != nil || n != 0 {
		t.Fatalf("fleet in flight after all done: %d, %v", n, err)
	}
}

func TestFleetWithWaitErrors(t *testing.T) {
	t.Parallel()
	_, err := fleetconc.New(fleetconc.WithPerKey(fleetconc.PerKey{Name: "u", Cap: 1, Key: byUser, Client: redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})}),
		fleetconc.WithWait(concurrency.Wait{Max: -time.Second}))
	if want := "fleetconc: WithWait: concurrency: Wait: max: -1s is negative"; err == nil || err.Error() != want {
		t.Fatalf("New = %v, want %s", err, want)
	}
}

// TestFleetWaitStorm: two instances on one Redis, 6 goroutines of 40
// requests each, a fleet cap of 2 per user (2 users) that waits on real
// time, polling across instances, with a queue longer than the callers
// (so no request is turned away by a full queue) and a deadline no wait
// in the storm comes near (a holder holds its slot 1ms); 1 request in 9
// is cancelled 2ms after it starts (waiting, asking Redis or admitted by
// then, as the schedule has it). The storm starts with every slot held,
// so the first 6 requests (all for u0, 3 on each instance) wait until
// the holds are let go. The fleet cap holds: no user ever has more than
// 2 requests in flight across the fleet. Every request is admitted but
// the cancelled ones, which may be denied with their context's error: so
// at least 240 - 24 are, and the 6 first ones got their slots only after
// waiting in the queue. At the end no request waits and Redis holds no
// slot (a cancelled acquire's slot is removed in the background: waited
// for, bounded).
func TestFleetWaitStorm(t *testing.T) {
	t.Parallel()
	const (
		workers, perWorker = 6, 40
		cancelEvery        = 9 // request i of a worker is cancelled when i%9 == 4
		cancelled          = workers * 4
	)
	srv := redistest.Start(t)
	inst := func() *fleetconc.Limiter {
		// A call that ran out of its Timeout would fail open, admitted
		// without a slot: callTimeout is one no healthy call comes near.
		l, err := fleetconc.New(fleetconc.WithPerKey(fleetconc.PerKey{Name: "fleet-user", Cap: 2, Key: byUser, Client: srv.NewClient(),
			Lease: lease, Timeout: callTimeout}),
			fleetconc.WithWait(concurrency.Wait{Max: 20 * time.Second, Queue: workers + 2}))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	ls := []*fleetconc.Limiter{inst(), inst()}
	var (
		mu       sync.Mutex
		perUser  = map[string]int{}
		admitted int
		denied   int // cancelled, denied with the context's error
	)
	// Every slot is held when the storm starts.
	type hold struct {
		user string
		done floodgate.Done
	}
	var holds []hold
	for _, u := range []string{"u0", "u1"} {
		for range 2 {
			_, done := mustAdmit(t, ls[0], req("/m", "acme", u))
			holds = append(holds, hold{u, done})
			perUser[u]++
		}
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				l := ls[(w+i)%2]
				r := req("/m", "acme", "u"+strconv.Itoa(i%2))
				r.Priority = floodgate.Priority(1 + (w+i)%4)
				c, cancel := context.WithCancel(ctx)
				if i%cancelEvery == 4 {
					go func() { time.Sleep(2 * time.Millisecond); cancel() }()
				}
				d, done, err := l.Admit(c, r)
				switch {
				case d.Allowed && (err != nil || d.Source != floodgate.SourceConcurrency):
					t.Errorf("worker %d request %d admitted by %s with error %v, want by the cap with none", w, i, d.Source, err)
					done(floodgate.Result{})
				case d.Allowed:
					mu.Lock()
					admitted++
					perUser[r.Identity.User]++
					if perUser[r.Identity.User] > 2 {
						t.Errorf("user %s: %d in flight across the fleet", r.Identity.User, perUser[r.Identity.User])
					}
					mu.Unlock()
					time.Sleep(time.Millisecond)
					mu.Lock()
					perUser[r.Identity.User]--
					mu.Unlock()
					done(floodgate.Result{})
				case i%cancelEvery == 4 && errors.Is(err, context.Canceled):
					mu.Lock()
					denied++
					mu.Unlock()
				default:
					t.Errorf("worker %d request %d denied: %+v, %v (only a cancelled request may be)", w, i, d, err)
				}
				cancel()
			}
		})
	}
	// The 6 first requests wait, 3 on each instance; then the holds end.
	poll(t, func() bool { return ls[0].Waiting() == 3 && ls[1].Waiting() == 3 }, "the first requests to wait on both instances")
	for _, h := range holds {
		mu.Lock()
		perUser[h.user]--
		mu.Unlock()
		h.done(floodgate.Result{})
	}
	wg.Wait()
	if admitted+denied != workers*perWorker || admitted < workers*perWorker-cancelled {
		t.Errorf("admitted %d, denied %d of %d; want every request but the %d cancelled admitted", admitted, denied, workers*perWorker, cancelled)
	}
	if got := ls[0].WaitedSlots() + ls[1].WaitedSlots(); got < workers {
		t.Errorf("%d slots got after waiting in the queue, want at least the %d of the requests that waited for the holds", got, workers)
	}
	for _, l := range ls {
		if l.Waiting() != 0 {
			t.Errorf("%d waiting at the end", l.Waiting())
		}
	}
	for _, u := range []string{"u0", "u1"} {
		poll(t, func() bool {
			n, err := ls[0].FleetInFlight(ctx, "fleet-user", u)
			return err == nil && n == 0
		}, "%s's slots to be removed from Redis", u)
	}
	t.Logf("admitted %d, denied %d (cancelled), %d+%d slots got after waiting", admitted, denied, ls[0].WaitedSlots(), ls[1].WaitedSlots())
}
