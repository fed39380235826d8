package concurrency_test

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/testing/clock"
)

// admitter is what the waiting tests drive: a Limiter or an Adaptive.
type admitter interface {
	floodgate.Admitter
	Waiting() int
}

// outcome is what one Admit returned.
type outcome struct {
	name string
	d    floodgate.Decision
	done floodgate.Done
	err  error
}

// waitingAdmit starts Admit of r in a goroutine and returns once r is
// waiting (the limiter's Waiting count reached want); its outcome arrives
// on out, tagged with name.
func waitingAdmit(t *testing.T, l admitter, c context.Context, r *floodgate.Request, name string, want int, out chan<- outcome) {
	t.Helper()
	go func() {
		d, done, err := l.Admit(c, r)
		out <- outcome{name, d, done, err}
	}()
	waitFor(t, func() bool { return l.Waiting() == want }, "%d waiting", want)
}

// waitFor polls cond for at most 5s.
func waitFor(t *testing.T, cond func() bool, format string, args ...any) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for "+format, args...)
		}
		time.Sleep(time.Millisecond)
	}
}

func recv(t *testing.T, out <-chan outcome) outcome {
	t.Helper()
	select {
	case o := <-out:
		return o
	case <-time.After(5 * time.Second):
		t.Fatal("no outcome within 5s")
		return outcome{}
	}
}

func preq(user string, p floodgate.Priority) *floodgate.Request {
	r := req("/m", "acme", user)
	r.Priority = p
	return r
}

// TestWaitOrder: with one slot held and requests of mixed priorities
// waiting, each release admits exactly the next in order: the highest
// priority first, then the oldest (FIFO) or the newest (LIFO).
func TestWaitOrder(t *testing.T) {
	t.Parallel()
	R, C := floodgate.PriorityRead, floodgate.PriorityCritical
	joins := []struct {
		name string
		p    floodgate.Priority
	}{{"r1", R}, {"r2", R}, {"c1", C}, {"r3", R}, {"c2", C}}
	for _, tc := range []struct {
		order concurrency.WaitOrder
		want  string
	}{
		{concurrency.FIFO, "c1 c2 r1 r2 r3"},
		{concurrency.LIFO, "c2 c1 r3 r2 r1"},
	} {
		t.Run(tc.order.String(), func(t *testing.T) {
			l := mustNew(t, concurrency.WithGlobal(1), concurrency.WithWait(concurrency.Wait{Max: time.Hour, Order: tc.order}))
			_, done := mustAdmit(t, l, preq("holder", R))
			out := make(chan outcome, len(joins))
			for i, j := range joins {
				waitingAdmit(t, l, ctx, preq(j.name, j.p), j.name, i+1, out)
			}
			var got []string
			for range joins {
				done(floodgate.Result{})
				o := recv(t, out)
				if !o.d.Allowed || o.err != nil || o.done == nil {
					t.Fatalf("%s: %+v, %v", o.name, o.d, o.err)
				}
				got = append(got, o.name)
				done = o.done
				if n := l.InFlight(); n != 1 {
					t.Fatalf("after admitting %s: %d in flight, want 1", o.name, n)
				}
			}
			done(floodgate.Result{})
			if g := strings.Join(got, " "); g != tc.want {
				t.Fatalf("admitted in order %q, want %q", g, tc.want)
			}
			if l.Waiting() != 0 || l.InFlight() != 0 {
				t.Fatalf("%d waiting, %d in flight after all done", l.Waiting(), l.InFlight())
			}
		})
	}
}

// TestWaitTimesOutOnClock: a waiting request is denied exactly when Max
// has passed on the limiter's Clock, with the full cap's deny and no
// error, and leaves the queue.
func TestWaitTimesOutOnClock(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Unix(1_700_000_000, 0))
	l := mustNew(t, concurrency.WithGlobal(1), concurrency.WithClock(clk),
		concurrency.WithWait(concurrency.Wait{Max: 100 * time.Millisecond}))
	_, done := mustAdmit(t, l, req("/m", "acme", "holder"))
	defer done(floodgate.Result{})
	out := make(chan outcome, 1)
	waitingAdmit(t, l, ctx, req("/m", "acme", "w"), "w", 1, out)
	waitFor(t, func() bool { return clk.Timers() == 1 }, "the wait's timer")
	clk.Advance(99 * time.Millisecond)
	select {
	case o := <-out:
		t.Fatalf("denied before Max passed: %+v", o.d)
	default:
	}
	if clk.Timers() != 1 || l.Waiting() != 1 { // nothing else could end the wait
		t.Fatalf("1ms before Max: %d timers, %d waiting; want the wait's timer pending and the request waiting", clk.Timers(), l.Waiting())
	}
	clk.Advance(time.Millisecond)
	o := recv(t, out)
	if o.d.Allowed || o.err != nil || o.done != nil || o.d.Policy != concurrency.DefaultPolicy || o.d.Limit != 1 ||
		o.d.RetryAfter != concurrency.DefaultRetryAfter || o.d.Stage != floodgate.StageConcurrency {
		t.Fatalf("after Max: %+v, done %v, err %v; want the global cap's deny", o.d, o.done != nil, o.err)
	}
	if l.Waiting() != 0 {
		t.Fatalf("%d still waiting", l.Waiting())
	}
}

// TestWaitCancelFreesQueueSlot: with a queue of one, a second request is
// denied at once; cancelling the waiting one denies it with the context's
// error and RetryAfter 0, and its place in the queue is free again.
func TestWaitCancelFreesQueueSlot(t *testing.T) {
	t.Parallel()
	l := mustNew(t, concurrency.WithGlobal(1), concurrency.WithWait(concurrency.Wait{Max: time.Hour, Queue: 1}))
	_, done := mustAdmit(t, l, req("/m", "acme", "holder"))
	cctx, cancel := context.WithCancel(ctx)
	out := make(chan outcome, 2)
	waitingAdmit(t, l, cctx, req("/m", "acme", "a"), "a", 1, out)

	d, err := mustDeny(t, l, req("/m", "acme", "b")) // queue full: at once
	if err != nil || d.Policy != concurrency.DefaultPolicy {
		t.Fatalf("b with the queue full: %+v, %v", d, err)
	}
	cancel()
	o := recv(t, out)
	if o.d.Allowed || o.done != nil || !errors.Is(o.err, context.Canceled) || o.d.RetryAfter != 0 || o.d.Policy != concurrency.DefaultPolicy {
		t.Fatalf("cancelled a: %+v, %v", o.d, o.err)
	}
	if l.Waiting() != 0 {
		t.Fatalf("%d waiting after the cancel", l.Waiting())
	}
	waitingAdmit(t, l, ctx, req("/m", "acme", "c"), "c", 1, out) // the freed place
	done(floodgate.Result{})
	if o := recv(t, out); o.name != "c" || !o.d.Allowed {
		t.Fatalf("c: %+v, %v", o.d, o.err)
	}
	if l.InFlight() != 1 {
		t.Fatalf("%d in flight, want 1 (c)", l.InFlight())
	}
}

// TestWaitQueueFullPriority: a full queue denies a request of no higher
// priority at once; a critical one takes the place of the waiting request
// a slot would reach last (the newest read under FIFO, the oldest under
// LIFO), which is denied at once.
func TestWaitQueueFullPriority(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		order   concurrency.WaitOrder
		evicted string
	}{{concurrency.FIFO, "r2"}, {concurrency.LIFO, "r1"}} {
		t.Run(tc.order.String(), func(t *testing.T) {
			l := mustNew(t, concurrency.WithGlobal(1), concurrency.WithWait(concurrency.Wait{Max: time.Hour, Queue: 2, Order: tc.order}))
			_, done := mustAdmit(t, l, preq("holder", floodgate.PriorityRead))
			out := make(chan outcome, 3)
			waitingAdmit(t, l, ctx, preq("r1", floodgate.PriorityRead), "r1", 1, out)
			waitingAdmit(t, l, ctx, preq("r2", floodgate.PriorityRead), "r2", 2, out)
			if d, _ := mustDeny(t, l, preq("r3", floodgate.PriorityWrite-1)); d.Policy != concurrency.DefaultPolicy {
				t.Fatalf("r3: %+v", d)
			}
			go func() {
				d, dn, err := l.Admit(ctx, preq("c1", floodgate.PriorityCritical))
				out <- outcome{"c1", d, dn, err}
			}()
			o := recv(t, out)
			if o.name != tc.evicted || o.d.Allowed || o.err != nil {
				t.Fatalf("first out: %s %+v %v; want %s evicted", o.name, o.d, o.err, tc.evicted)
			}
			waitFor(t, func() bool { return l.Waiting() == 2 }, "2 waiting")
			done(floodgate.Result{})
			if o := recv(t, out); o.name != "c1" || !o.d.Allowed {
				t.Fatalf("after release: %s %+v; want c1 admitted", o.name, o.d)
			} else {
				o.done(floodgate.Result{})
			}
			o = recv(t, out)
			if o.d.Allowed {
				o.done(floodgate.Result{})
			}
			if want := map[string]string{"r1": "r2", "r2": "r1"}[tc.evicted]; o.name != want || !o.d.Allowed {
				t.Fatalf("then: %s %+v; want %s admitted", o.name, o.d, want)
			}
		})
	}
}

// TestWaitPerKey: a freed slot of one key admits the first request
// waiting for that key, even though a request for another key (still
// full) waits ahead of it.
func TestWaitPerKey(t *testing.T) {
	t.Parallel()
	l := mustNew(t, concurrency.WithPerKey(concurrency.PerKey{Name: "user", Cap: 1, Key: byUser}),
		concurrency.WithWait(concurrency.Wait{Max: time.Hour}))
	_, doneA := mustAdmit(t, l, req("/m", "acme", "alice"))
	_, doneB := mustAdmit(t, l, req("/m", "acme", "bob"))
	out := make(chan outcome, 2)
	waitingAdmit(t, l, ctx, req("/m", "acme", "alice"), "alice-2", 1, out)
	waitingAdmit(t, l, ctx, req("/m", "acme", "bob"), "bob-2", 2, out)
	doneB(floodgate.Result{})
	o := recv(t, out)
	if o.name != "bob-2" || !o.d.Allowed || o.d.Policy != "user" {
		t.Fatalf("after bob's release: %s %+v", o.name, o.d)
	}
	if n, _ := l.KeyInFlight("user", "bob"); n != 1 || l.Waiting() != 1 {
		t.Fatalf("bob in flight %d, waiting %d; want 1, 1", n, l.Waiting())
	}
	o.done(floodgate.Result{})
	doneA(floodgate.Result{})
	if o := recv(t, out); o.name != "alice-2" || !o.d.Allowed {
		t.Fatalf("after alice's release: %s %+v", o.name, o.d)
	} else {
		o.done(floodgate.Result{})
	}
}

// TestWaitAdaptive: the adaptive limiter holds a request at its limit and
// admits it when a slot frees; a bypassing priority never waits.
func TestWaitAdaptive(t *testing.T) {
	t.Parallel()
	a, err := concurrency.NewAdaptive(concurrency.AdaptiveConfig{Initial: 1, Min: 1, Max: 1,
		Bypass: floodgate.PriorityCritical, Wait: concurrency.Wait{Max: time.Hour, Order: concurrency.LIFO}})
	if err != nil {
		t.Fatal(err)
	}
	d, done, _ := a.Admit(ctx, preq("holder", floodgate.PriorityRead))
	if !d.Allowed {
		t.Fatal(d)
	}
	out := make(chan outcome, 2)
	waitingAdmit(t, a, ctx, preq("w", floodgate.PriorityRead), "w", 1, out)
	if d, cdone, _ := a.Admit(ctx, preq("c", floodgate.PriorityCritical)); !d.Allowed || a.Waiting() != 1 {
		t.Fatalf("critical with bypass: %+v, %d waiting", d, a.Waiting())
	} else {
		cdone(floodgate.Result{})
	}
	done(floodgate.Result{})
	o := recv(t, out)
	if !o.d.Allowed || o.d.Policy != "adaptive-concurrency" || a.InFlight() != 1 {
		t.Fatalf("waiter: %+v, %d in flight", o.d, a.InFlight())
	}
	o.done(floodgate.Result{})
	if got := a.Config().Wait; got != (concurrency.Wait{Max: time.Hour, Queue: concurrency.DefaultQueue, Order: concurrency.LIFO}) {
		t.Fatalf("Config().Wait = %+v", got)
	}
}

// TestWaitAlreadyCancelled: a request whose context has ended is denied
// at once with the context's error, without joining the queue.
func TestWaitAlreadyCancelled(t *testing.T) {
	t.Parallel()
	l := mustNew(t, concurrency.WithGlobal(1), concurrency.WithWait(concurrency.Wait{Max: time.Hour}))
	_, done := mustAdmit(t, l, req("/m", "acme", "holder"))
	defer done(floodgate.Result{})
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	d, dn, err := l.Admit(cctx, req("/m", "acme", "x"))
	if d.Allowed || dn != nil || !errors.Is(err, context.Canceled) || l.Waiting() != 0 {
		t.Fatalf("%+v, %v, %d waiting", d, err, l.Waiting())
	}
}

// TestSetWait: waiting starts and stops at run time; a bad Wait changes
// nothing and names each field.
func TestSetWait(t *testing.T) {
	t.Parallel()
	l := mustNew(t, concurrency.WithGlobal(1))
	_, done := mustAdmit(t, l, req("/m", "acme", "holder"))
	mustDeny(t, l, req("/m", "acme", "x")) // no wait configured: at once
	err := l.SetWait(concurrency.Wait{Max: -time.Second, Queue: -1, Order: 9})
	want := "concurrency: Wait: max: -1s is negative\nconcurrency: Wait: queue: -1 is negative\nconcurrency: Wait: order: 9 is not a known order (FIFO, LIFO, CoDel)"
	if err == nil || err.Error() != want {
		t.Fatalf("SetWait(bad) = %v\nwant %s", err, want)
	}
	if err := l.SetWait(concurrency.Wait{Max: time.Hour}); err != nil {
		t.Fatal(err)
	}
	out := make(chan outcome, 1)
	waitingAdmit(t, l, ctx, req("/m", "acme", "w"), "w", 1, out)
	done(floodgate.Result{})
	if o := recv(t, out); !o.d.Allowed {
		t.Fatalf("%+v", o.d)
	} else {
		o.done(floodgate.Result{})
	}
}

func TestWaitOptionErrors(t *testing.T) {
	t.Parallel()
	_, err := concurrency.New(concurrency.WithGlobal(1), concurrency.WithWait(concurrency.Wait{Max: -1, Queue: -2}), concurrency.WithClock(nil))
	want := "concurrency: WithWait: Wait.Max -1ns is negative\nconcurrency: WithWait: Wait.Queue -2 is negative\nconcurrency: WithClock: clock is nil"
	if err == nil || err.Error() != want {
		t.Fatalf("New = %v\nwant %s", err, want)
	}
	_, err = concurrency.NewAdaptive(concurrency.AdaptiveConfig{Wait: concurrency.Wait{Order: 3}})
	if want := "concurrency: NewAdaptive: wait.order: 3 is not a known order (FIFO, LIFO, CoDel)"; err == nil || err.Error() != want {
		t.Fatalf("NewAdaptive = %v\nwant %s", err, want)
	}
	var o concurrency.WaitOrder
	if err := o.UnmarshalText([]byte(" LIFO ")); err != nil || o != concurrency.LIFO {
		t.Fatalf("UnmarshalText(LIFO) = %v, %v", o, err)
	}
	if err := o.UnmarshalText([]byte("random")); err == nil {
		t.Fatal("UnmarshalText(random) accepted")
	}
}

// TestWaitStorm: 8 goroutines of 150 requests of mixed priorities and
// users, every seventh cancelled 1ms after it is sent, against a global
// cap of 3 and a per-user cap of 2 that wait up to 20ms, LIFO, in a
// queue of 6. The waits are timed on a fake clock that every admitted
// request moves by 1ms as it ends, so a wait ends after about 20 requests
// ran, whatever the machine's load. An admitted request holds its slot
// until a request waits (or too few goroutines are left to fill the
// global cap), so releases meet waiting requests. Neither cap is ever
// exceeded; every request is admitted or denied, some admitted only after
// waiting (a release handed them the slot); a deny names its cap, as
// without waiting, or comes with the error of a cancelled context (and
// RetryAfter 0); and every slot and queue place is given back.
func TestWaitStorm(t *testing.T) {
	t.Parallel()
	const (
		workers, perWorker = 8, 150
		global, perUser    = 3, 2
	)
	clk := clock.New(time.Time{})
	l := mustNew(t, concurrency.WithGlobal(global), concurrency.WithClock(clk),
		concurrency.WithPerKey(concurrency.PerKey{Name: "user", Cap: perUser, Key: byUser}),
		concurrency.WithWait(concurrency.Wait{Max: 20 * time.Millisecond, Queue: 6, Order: concurrency.LIFO}))
	var (
		mu               sync.Mutex
		inflight, peak   int
		users            = map[string]int{}
		admitted, denied atomic.Int64
		active           atomic.Int64 // goroutines not done
		stuck            atomic.Bool  // a hold met no waiting request in 10s: holds end, the test fails
		wg               sync.WaitGroup
	)
	active.Store(workers)
	for w := range workers {
		wg.Go(func() {
			defer active.Add(-1)
			for i := range perWorker {
				r := preq("u"+strconv.Itoa((w+i)%3), floodgate.Priority(1+(w+i)%4))
				c, cancel := context.WithCancel(ctx)
				if i%7 == 3 {
					go func() { time.Sleep(time.Millisecond); cancel() }()
				}
				d, done, err := l.Admit(c, r)
				if err != nil && c.Err() == nil {
					t.Errorf("error with a live context: %v", err)
				}
				if !d.Allowed {
					switch {
					case err != nil: // its context ended
						if !errors.Is(err, context.Canceled) || d.RetryAfter != 0 || d.Stage != floodgate.StageConcurrency {
							t.Errorf("a request whose context ended: %+v, %v; want RetryAfter 0 and the context's error", d, err)
						}
					case d.Stage != floodgate.StageConcurrency || (d.Policy != concurrency.DefaultPolicy && d.Policy != "user") || d.RetryAfter != concurrency.DefaultRetryAfter:
						t.Errorf("a deny that names no cap: %+v", d)
					}
					denied.Add(1)
					cancel()
					continue
				}
				admitted.Add(1)
				mu.Lock()
				inflight++
				users[r.Identity.User]++
				peak = max(peak, inflight)
				if n := users[r.Identity.User]; n > perUser {
					t.Errorf("user %s has %d in flight, cap %d", r.Identity.User, n, perUser)
				}
				mu.Unlock()
				for until := time.Now().Add(10 * time.Second); l.Waiting() == 0 && active.Load() > global && !stuck.Load(); runtime.Gosched() {
					if time.Now().After(until) && !stuck.Swap(true) {
						t.Errorf("no request waited within 10s while %d goroutines ran", active.Load())
					}
				}
				mu.Lock()
				inflight--
				users[r.Identity.User]--
				mu.Unlock()
				clk.Advance(time.Millisecond)
				done(floodgate.Result{})
				cancel()
			}
		})
	}
	wg.Wait()
	if peak > global || l.InFlight() != 0 || l.Waiting() != 0 {
		t.Fatalf("peak %d in flight (cap %d), %d in flight and %d waiting at the end", peak, global, l.InFlight(), l.Waiting())
	}
	for _, u := range []string{"u0", "u1", "u2"} {
		if n, _ := l.KeyInFlight("user", u); n != 0 {
			t.Fatalf("%s: %d in flight at the end", u, n)
		}
	}
	if k, _ := l.Keys("user"); k != 0 {
		t.Fatalf("the per-user cap still tracks %d keys", k)
	}
	waited := l.Waited()
	if admitted.Load()+denied.Load() != workers*perWorker || admitted.Load() == 0 || waited == 0 || waited > admitted.Load() {
		t.Fatalf("admitted %d (%d of them after waiting), denied %d, of %d requests: want every request admitted or denied, and some admitted after waiting",
			admitted.Load(), waited, denied.Load(), workers*perWorker)
	}
}
