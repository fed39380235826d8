package concurrency_test

import (
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
)

// With the cap of 4 full (noisy holds 3, quiet 1) and noisy's three
// waiters ahead of quiet's two, each freed slot goes to the tenant asking
// less (holding and waiting), FIFO among one tenant's: the slots free in
// the order they were taken, so after each release noisy asks 5 and quiet
// 3 (q1), 4 and 3 (q2), then only noisy waits. Without fairness the slots
// go in arrival order, noisy's first.
func TestWaitFairnessHandsSlotsToTheLightestCaller(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		fair *floodgate.Fairness
		want string
	}{
		{&floodgate.Fairness{By: "tenant"}, "q1 q2 n1 n2 n3"},
		{nil, "n1 n2 n3 q1 q2"},
	} {
		l := mustNew(t, concurrency.WithGlobal(4), concurrency.WithWait(concurrency.Wait{Max: time.Hour, Fairness: tc.fair}))
		var noisy []floodgate.Done
		for range 3 {
			_, done := mustAdmit(t, l, req("/m", "noisy", "u"))
			noisy = append(noisy, done)
		}
		_, quiet := mustAdmit(t, l, req("/m", "quiet", "u"))
		out := make(chan outcome, 5)
		for i, name := range []string{"n1", "n2", "n3", "q1", "q2"} {
			tenant := map[byte]string{'n': "noisy", 'q': "quiet"}[name[0]]
			waitingAdmit(t, l, ctx, req("/m", tenant, name), name, i+1, out)
		}
		var got []string
		held := append(noisy[1:], quiet)
		release := noisy[0]
		for range 5 {
			release(floodgate.Result{})
			o := recv(t, out)
			if !o.d.Allowed || o.err != nil {
				t.Fatalf("%s: %+v, %v", o.name, o.d, o.err)
			}
			got = append(got, o.name)
			release, held = held[0], append(held[1:], o.done)
		}
		release(floodgate.Result{})
		for _, d := range held {
			d(floodgate.Result{})
		}
		if g := strings.Join(got, " "); g != tc.want {
			t.Errorf("fairness %v: slots went to %q, want %q", tc.fair != nil, g, tc.want)
		}
		if l.InFlight() != 0 || l.Waiting() != 0 {
			t.Fatalf("%d in flight, %d waiting after all done", l.InFlight(), l.Waiting())
		}
	}
}

// A full queue refuses the waiter whose tenant holds most: with fairness
// a quiet tenant's request takes the place of a noisy one's (the newest,
// which a slot would reach last); without, it is refused as the newest of
// its priority.
func TestWaitFairnessEvictsTheHeaviestCaller(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		fair    *floodgate.Fairness
		evicted string
	}{
		{&floodgate.Fairness{By: "tenant"}, "n2"},
		{nil, "q1"},
	} {
		l := mustNew(t, concurrency.WithGlobal(2), concurrency.WithWait(concurrency.Wait{Max: time.Hour, Queue: 2, Fairness: tc.fair}))
		_, d1 := mustAdmit(t, l, req("/m", "noisy", "u"))
		_, d2 := mustAdmit(t, l, req("/m", "noisy", "u"))
		out := make(chan outcome, 3)
		waitingAdmit(t, l, ctx, req("/m", "noisy", "n1"), "n1", 1, out)
		waitingAdmit(t, l, ctx, req("/m", "noisy", "n2"), "n2", 2, out)
		go func() {
			d, done, err := l.Admit(ctx, req("/m", "quiet", "q1"))
			out <- outcome{"q1", d, done, err}
		}()
		o := recv(t, out)
		if o.d.Allowed || o.name != tc.evicted {
			t.Errorf("fairness %v: %s refused (allowed %v), want %s refused", tc.fair != nil, o.name, o.d.Allowed, tc.evicted)
		}
		for _, d := range []floodgate.Done{d1, d2} {
			d(floodgate.Result{})
		}
		for range 2 {
			if o := recv(t, out); o.done != nil {
				o.done(floodgate.Result{})
			}
		}
	}
}
