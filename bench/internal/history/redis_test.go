package history

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// takesPerGoroutine is how many takes each goroutine of run makes: 360
// in all, a count, not a duration, so that what the checker is given does
// not depend on the machine's speed.
const takesPerGoroutine = 60

// run makes two "processes" (each its own client, store and recorder)
// with 3 goroutines each make takesPerGoroutine takes from three levels (a
// shared token bucket, a token bucket per user and a fixed window per
// user) on a real redis-server, one every millisecond or so, and returns
// the merged history. The limits are low (the shared bucket 10/s, burst
// 8) so that whatever the takes' pace, most are denied: the shared bucket
// allows 8 + 10/s, and even if half the takes give up (each after 25 ms)
// the 180 answered outnumber twice that unless the takes last over 8
// seconds, where they take under two on a loaded 2-core machine. With pause, Redis is first stopped while process 0 makes one
// take that gives up after 25 ms (so the history holds at least one take
// of unknown outcome, which Redis may still apply when it continues),
// then stopped for 40 ms every 250 ms while the goroutines run (their
// takes give up after 25 ms too). fault, when not 0, breaks every 7th
// take of the first process.
func run(t *testing.T, pause bool, fault Fault) History {
	t.Helper()
	srv := redistest.Start(t)
	prefix := fmt.Sprintf("hist:%d:", time.Now().UnixNano())
	levels := func(user int) []quota.Bucket {
		u := fmt.Sprintf("u%d", user)
		return []quota.Bucket{
			{Key: prefix + "tb:tenant", Limit: quota.Limit{Algorithm: quota.TokenBucket, Rate: 10, Period: time.Second, Burst: 8}, Cost: 1},
			{Key: prefix + "tb:user:" + u, Limit: quota.Limit{Algorithm: quota.TokenBucket, Rate: 5, Period: time.Second, Burst: 4}, Cost: 1},
			{Key: prefix + "fw:user:" + u, Limit: quota.Limit{Algorithm: quota.FixedWindow, Rate: 3, Period: 500 * time.Millisecond}, Cost: 1},
		}
	}
	var recs []*Recorder
	for p := range 2 {
		client := srv.NewClient()
		client.AddHook(NowHook{})
		rs, err := redisstore.New(client, redisstore.WithBatching(0, 0))
		if err != nil {
			t.Fatal(err)
		}
		var s quota.Store = rs
		if fault != 0 && p == 0 {
			s = NewBroken(rs, fault, 7)
		}
		recs = append(recs, NewRecorder(s, p))
	}
	for _, rec := range recs {
		rec.Start()
	}
	take := func(rec *Recorder, user int) {
		res := make([]quota.Result, 3)
		ctx, cancel := context.WithTimeout(context.Background(), 25*time.Millisecond)
		defer cancel()
		_, _ = rec.Take(ctx, levels(user), res)
	}
	stopPause := make(chan struct{})
	var pauser sync.WaitGroup
	if pause {
		srv.Pause()
		take(recs[0], 0) // Redis cannot answer: unknown outcome
		srv.Resume()
		pauser.Go(func() {
			tk := time.NewTicker(250 * time.Millisecond)
			defer tk.Stop()
			for range 40 { // bounded: the takes end long before
				select {
				case <-stopPause:
					return
				case <-tk.C:
				}
				srv.Pause()
				time.Sleep(40 * time.Millisecond)
				srv.Resume()
			}
		})
	}
	var wg sync.WaitGroup
	for p, rec := range recs {
		for g := range 3 {
			wg.Go(func() {
				for n := range takesPerGoroutine {
					take(rec, (p*3+g+n)%4)
					time.Sleep(time.Millisecond)
				}
			})
		}
	}
	wg.Wait()
	close(stopPause)
	pauser.Wait()
	var h History
	for _, rec := range recs {
		h.Ops = append(h.Ops, rec.Ops()...)
	}
	return h
}

func checked(t *testing.T, h History) Result {
	t.Helper()
	r, err := Check(h, Options{Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(r)
	var allowed, denied int
	for _, o := range h.Ops {
		switch o.Outcome {
		case Allowed:
			allowed++
		case Denied:
			denied++
		}
	}
	t.Logf("%d allowed, %d denied", allowed, denied)
	if allowed == 0 || denied < allowed {
		t.Errorf("%d allowed and %d denied: the takes should be over the limits", allowed, denied)
	}
	return r
}

// TestRealStoreLinearizable: the real Redis store's history, with Redis
// paused so that some takes time out (at least the one made while it is
// stopped), is linearizable, and the checker used the Redis time of the
// answered takes; and the same history with one deny turned into an allow
// is not.
func TestRealStoreLinearizable(t *testing.T) {
	t.Parallel()
	h := run(t, true, 0)
	r := checked(t, h)
	if r.Verdict != Linearizable {
		t.Fatalf("real store: %s\n%s", r, r.Counterexample)
	}
	if r.Unknown == 0 {
		t.Error("no take timed out during the pauses")
	}
	if r.WithTime != r.Takes {
		t.Errorf("%d of %d answered takes have their Redis time", r.WithTime, r.Takes)
	}
	// One answer changed, a deny into an allow (the remaining it reported
	// kept), is caught.
	for i := len(h.Ops) / 2; i < len(h.Ops); i++ {
		if o := &h.Ops[i]; o.Outcome == Denied {
			o.Outcome = Allowed
			for j := range o.Buckets {
				o.Buckets[j].Allowed = true
			}
			if r := checked(t, h); r.Verdict != NotLinearizable {
				t.Errorf("take %d turned allowed: %s, want NOT linearizable", i, r)
			}
			break
		}
	}
}

// TestBrokenStoreFails: a store that answers some takes "allowed" without
// charging, or charges levels one at a time (not all or nothing), fails
// the check.
func TestBrokenStoreFails(t *testing.T) {
	t.Parallel()
	for _, f := range []Fault{Skip, Split} {
		t.Run(map[Fault]string{Skip: "skip", Split: "split"}[f], func(t *testing.T) {
			t.Parallel()
			h := run(t, false, f)
			r := checked(t, h)
			if r.Verdict != NotLinearizable {
				t.Fatalf("broken store (%d): %s, want NOT linearizable", f, r)
			}
			t.Log(r.Counterexample)
		})
	}
}
