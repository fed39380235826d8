package concurrency_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/testing/clock"
)

// TestWaitRefusesWhatCannotRunInTime: once the queue's pace is measured
// (a slot freed every 10s while requests waited, each held 10s), a request
// whose deadline comes before a slot would reach it and it would finish
// is refused at once, as without waiting and with no error; one whose
// deadline leaves room waits. Under FIFO the request waits behind every
// one of its priority; under LIFO only behind higher priorities. Before
// the pace is measured every request waits. The fake clock starts at the
// real time, so the contexts' deadlines (real) lie ahead.
func TestWaitRefusesWhatCannotRunInTime(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		order concurrency.WaitOrder
		// the request with 25s to its deadline: refused (FIFO: one
		// ahead, a slot in 20s and 10s to run) or waits (LIFO: a slot in
		// 10s and 10s to run)
		refused bool
	}{{concurrency.FIFO, true}, {concurrency.LIFO, false}} {
		t.Run(tc.order.String(), func(t *testing.T) {
			clk := clock.New(time.Now())
			l := mustNew(t, concurrency.WithGlobal(1), concurrency.WithClock(clk),
				concurrency.WithWait(concurrency.Wait{Max: time.Hour, Order: tc.order}))
			out := make(chan outcome, 8)
			_, holder := mustAdmit(t, l, req("/m", "acme", "holder"))
			waitingAdmit(t, l, ctx, req("/m", "acme", "a"), "a", 1, out)
			waitingAdmit(t, l, ctx, req("/m", "acme", "b"), "b", 2, out)
			deadline := func(d time.Duration) context.Context {
				c, cancel := context.WithDeadline(ctx, clk.Now().Add(d))
				t.Cleanup(cancel)
				return c
			}
			// Before the pace is known, a short deadline still waits.
			waitingAdmit(t, l, deadline(25*time.Second), req("/m", "acme", "early"), "early", 3, out)

			// The pace: a slot every 10s, held 10s. The holder's release
			// hands its slot to the first in line (a, or under LIFO the
			// newest: early); that one's release 10s later to the next.
			holder(floodgate.Result{})
			first := recv(t, out)
			clk.Advance(10 * time.Second)
			first.done(floodgate.Result{})
			second := recv(t, out)
			clk.Advance(10 * time.Second)
			if !first.d.Allowed || !second.d.Allowed {
				t.Fatalf("the first two in line: %+v, %+v", first.d, second.d)
			}
			second.done(floodgate.Result{}) // the last one in line gets the slot
			third := recv(t, out)
			if l.Waiting() != 0 || !third.d.Allowed {
				t.Fatalf("%d waiting, third %+v", l.Waiting(), third.d)
			}
			defer third.done(floodgate.Result{})
			waitingAdmit(t, l, ctx, req("/m", "acme", "c"), "c", 1, out)

			// One waits (c); the slot is held. Under FIFO a new request's
			// slot comes after 2 gaps and it runs 10s more: 30s.
			if !tc.refused {
				// LIFO: the newest first, so a slot in one gap and 10s
				// to run: 20s.
				if d, _, err := l.Admit(deadline(15*time.Second), req("/m", "acme", "near")); d.Allowed || err != nil || l.Late() != 1 {
					t.Fatalf("LIFO, 15s to its deadline: %+v, err %v, %d late; want refused at once", d, err, l.Late())
				}
				waitingAdmit(t, l, deadline(25*time.Second), req("/m", "acme", "d"), "d", 2, out)
				if l.Late() != 1 {
					t.Fatal("LIFO, 25s to its deadline: refused")
				}
				return
			}
			d, done, err := l.Admit(deadline(25*time.Second), req("/m", "acme", "d"))
			if d.Allowed || done != nil || err != nil || d.Policy != concurrency.DefaultPolicy || l.Waiting() != 1 || l.Late() != 1 {
				t.Fatalf("25s to its deadline behind one: %+v, err %v, %d waiting, %d late; want refused at once", d, err, l.Waiting(), l.Late())
			}
			waitingAdmit(t, l, deadline(35*time.Second), req("/m", "acme", "e"), "e", 2, out)
			if l.Late() != 1 {
				t.Fatal("35s to its deadline: refused")
			}
		})
	}
}

// TestCoDelStandsAndDrains: under CoDel the queue is FIFO until it has
// not emptied for Interval (100ms); then it stands: a freed slot goes to
// the newest request, and a request that joins waits at most Target
// (5ms). Once it empties it drains: FIFO and Max again.
func TestCoDelStandsAndDrains(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Unix(1_700_000_000, 0))
	l := mustNew(t, concurrency.WithGlobal(1), concurrency.WithClock(clk),
		concurrency.WithWait(concurrency.Wait{Max: time.Second, Order: concurrency.CoDel, Target: 5 * time.Millisecond, Interval: 100 * time.Millisecond}))
	out := make(chan outcome, 8)
	_, done := mustAdmit(t, l, req("/m", "acme", "holder"))
	release := func(name string) floodgate.Done {
		t.Helper()
		done(floodgate.Result{})
		o := recv(t, out)
		if !o.d.Allowed || o.name != name {
			t.Fatalf("the freed slot went to %s (%+v), want %s", o.name, o.d, name)
		}
		return o.done
	}
	waitingAdmit(t, l, ctx, req("/m", "acme", "w1"), "w1", 1, out)
	clk.Advance(150 * time.Millisecond)
	done = release("w1")                                           // the only one; the queue empties
	waitingAdmit(t, l, ctx, req("/m", "acme", "w2"), "w2", 1, out) // busy from 150ms
	waitingAdmit(t, l, ctx, req("/m", "acme", "w3"), "w3", 2, out)
	clk.Advance(50 * time.Millisecond)
	done = release("w2") // FIFO: busy 50ms
	waitingAdmit(t, l, ctx, req("/m", "acme", "w4"), "w4", 2, out)
	clk.Advance(50 * time.Millisecond)
	done = release("w4") // busy 100ms: it stands, LIFO

	// Standing: a request that joins now waits 5ms.
	timers := clk.Timers()
	waitingAdmit(t, l, ctx, req("/m", "acme", "w5"), "w5", 2, out)
	waitFor(t, func() bool { return clk.Timers() == timers+1 }, "w5's timer")
	clk.Advance(4 * time.Millisecond)
	select {
	case o := <-out:
		t.Fatalf("denied before Target: %s %+v", o.name, o.d)
	default:
	}
	clk.Advance(time.Millisecond)
	if o := recv(t, out); o.name != "w5" || o.d.Allowed || o.err != nil {
		t.Fatalf("the request that joined the standing queue, after 5ms: %s %+v %v; want w5 denied as without waiting", o.name, o.d, o.err)
	}
	done = release("w3") // the last one: the queue empties and drains

	waitingAdmit(t, l, ctx, req("/m", "acme", "w6"), "w6", 1, out)
	waitingAdmit(t, l, ctx, req("/m", "acme", "w7"), "w7", 2, out)
	done = release("w6") // FIFO again
	done = release("w7")
	done(floodgate.Result{})
	if l.Waiting() != 0 {
		t.Fatalf("%d waiting", l.Waiting())
	}
}
