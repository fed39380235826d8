package localfirst_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/tiers/localfirst"
	"github.com/floodgate-go/floodgate/tiers/memstore"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// TestOverRedis runs both local modes over a real redis-server as the
// ledger, on fake time: the same exact counts as over the in-process store.
func TestOverRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	clk := clock.New(t0)
	rs := redisLedger(t, srv, clk)
	s, err := localfirst.New(rs, rs, localfirst.WithClock(clk), localfirst.WithManualSync())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })

	for _, mode := range []quota.Consistency{quota.Leased, quota.Async} {
		b := bucket("redis-"+mode.String(), mode, 10, 10)
		n, src := drain(t, s, 100, b)
		if n != 10 {
			t.Fatalf("%s: admitted %d in one instant (%v), want the burst 10", mode, n, src)
		}
		local := src[floodgate.SourceLease] + src[floodgate.SourceAsync]
		if local == 0 {
			t.Fatalf("%s: nothing was decided locally (%v)", mode, src)
		}
	}
	// Close reports the async hits: the ledger's bucket is empty.
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	b := bucket("redis-async", quota.Exact, 10, 10)
	res := make([]quota.Result, 1)
	b.Cost = 0
	if _, err := rs.Take(context.Background(), []quota.Bucket{b}, res); err != nil || res[0].Remaining != 0 {
		t.Fatalf("after Close the async bucket has %d left (%v), want 0", res[0].Remaining, err)
	}
}

// TestGroupedReportsOnCluster: on a Redis Cluster, the reports of keys in
// different slots go out as one report call (the store splits it by
// slot) and each key is charged exactly what was spent. The cluster forms
// while the tests before this one run (StartClusterAsync).
func TestGroupedReportsOnCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	wait := redistest.StartClusterAsync(t)
	t.Parallel()
	c := wait()
	clk := clock.New(t0)
	rs, err := redisstore.New(c.Client(), redisstore.WithClock(clk), redisstore.WithMinTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	l := &countingLedger{Ledger: rs}
	s, err := localfirst.New(rs, l, localfirst.WithClock(clk), localfirst.WithManualSync())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	const keys = 12
	var bs []quota.Bucket
	for i := range keys {
		// Distinct hash tags: the keys spread over the cluster's slots.
		b := bucket("{k"+strconv.Itoa(i)+"}:async", quota.Async, 1, 1000)
		bs = append(bs, b)
		for range 5 { // a new key: all five decided locally
			if ok, _ := take(t, s, b); !ok {
				t.Fatal("denied far below the limit")
			}
		}
	}
	clk.Advance(10 * time.Second)
	if err := s.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Reports != keys || st.ReportedUnits != 5*keys || st.ReportFailures != 0 {
		t.Fatalf("stats %+v: want %d reports of 5 units each", st, keys)
	}
	if got := l.calls.Load(); got != 1 {
		t.Fatalf("%d ledger report calls, want 1", got)
	}
	res := make([]quota.Result, 1)
	for _, b := range bs {
		b.Cost, b.Consistency = 0, quota.Exact
		if _, err := rs.Take(context.Background(), []quota.Bucket{b}, res); err != nil {
			t.Fatal(err)
		}
		if res[0].Remaining != 995 {
			t.Fatalf("%s: %d left, want 995 (full, less the 5 reported)", b.Key, res[0].Remaining)
		}
	}
}

// lostReplies is a ledger whose first report call fails as a timed-out
// call does: applied by the store but its reply lost, or (drop) lost on
// the way and never applied; and whose first failResolve Resolve calls
// fail too.
type lostReplies struct {
	localfirst.Ledger
	drop        bool
	lose        atomic.Int64
	failResolve atomic.Int64
}

func (l *lostReplies) Report(ctx context.Context, inst, seq uint64, b []quota.Bucket, res []quota.ReportResult) error {
	if l.lose.Add(-1) >= 0 {
		if !l.drop {
			_ = l.Ledger.Report(ctx, inst, seq, b, res)
		}
		clear(res)
		return context.DeadlineExceeded
	}
	return l.Ledger.Report(ctx, inst, seq, b, res)
}

func (l *lostReplies) Resolve(ctx context.Context, inst, seq uint64, b []quota.Bucket, res []quota.ReportResult) error {
	if l.failResolve.Add(-1) >= 0 {
		return context.DeadlineExceeded
	}
	return l.Ledger.Resolve(ctx, inst, seq, b, res)
}

// TestReportSentAgainIsNotChargedTwice: a report call whose reply never
// came is resolved before its keys report again, so each unit is charged
// once whether the call was applied or never arrived, and when the first
// Resolve fails too; on the in-process store and on Redis.
func TestReportSentAgainIsNotChargedTwice(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, st := range []struct {
		name   string
		ledger func(clk *clock.Fake) localfirst.Ledger
	}{
		{"memstore", func(clk *clock.Fake) localfirst.Ledger {
			m, err := memstore.New(memstore.WithClock(clk))
			if err != nil {
				t.Fatal(err)
			}
			return m
		}},
		{"redis", func(clk *clock.Fake) localfirst.Ledger {
			rs, err := redisstore.New(srv.Client(), redisstore.WithClock(clk), redisstore.WithMinTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = rs.Close() })
			return rs
		}},
	} {
		for _, tc := range []struct {
			name        string
			drop        bool
			failResolve int64
		}{
			{name: "applied_reply_lost"},
			{name: "never_arrived", drop: true},
			{name: "applied_resolve_fails_once", failResolve: 1},
			{name: "never_arrived_resolve_fails_once", drop: true, failResolve: 1},
		} {
			t.Run(st.name+"/"+tc.name, func(t *testing.T) {
				clk := clock.New(t0)
				ledger := st.ledger(clk)
				l := &lostReplies{Ledger: ledger, drop: tc.drop}
				s, err := localfirst.New(ledger, l, localfirst.WithClock(clk), localfirst.WithManualSync())
				if err != nil {
					t.Fatal(err)
				}
				// 1/s: the refill over the test is below one unit.
				b := bucket("{lost-"+st.name+"-"+tc.name+"}", quota.Async, 1, 100)
				for range 60 { // past half the share: due every quarter interval
					take(t, s, b)
				}
				l.lose.Store(1)
				l.failResolve.Store(tc.failResolve)
				spent := int64(60)
				clk.Advance(20 * time.Millisecond)
				if err := s.Sync(context.Background()); err == nil {
					t.Fatal("the report call whose reply was lost did not fail")
				}
				for range tc.failResolve + 1 { // a hit, then a Sync that resolves (or fails to)
					take(t, s, b)
					spent++
					clk.Advance(20 * time.Millisecond)
					_ = s.Sync(context.Background())
				}
				if err := s.Close(context.Background()); err != nil {
					t.Fatalf("Close: %v", err)
				}
				// Every unit spent, each charged once (the refill over
				// the test is below a unit).
				if got, want := remainingOf(t, ledger, b), 100-spent; got != want {
					t.Fatalf("the ledger has %d left, want %d (%d spent)", got, want, spent)
				}
				if st := s.Stats(); st.ReportFailures != 1 || st.ReportedUnits != uint64(spent) || st.DebtUnits != 0 {
					t.Fatalf("stats %+v: want 1 failed report and all %d units reported", st, spent)
				}
			})
		}
	}
}

// remainingOf reads a ledger's bucket without charging it.
func remainingOf(t *testing.T, st quota.Store, b quota.Bucket) int64 {
	t.Helper()
	b.Cost, b.Consistency = 0, quota.Exact
	res := make([]quota.Result, 1)
	if _, err := st.Take(context.Background(), []quota.Bucket{b}, res); err != nil {
		t.Fatal(err)
	}
	return res[0].Remaining
}

// TestLeaseReturnSentAgainIsNotGivenBackTwice: unspent lease units go back
// in a report call; when its reply is lost (applied, or never arrived) the
// call is resolved, so the units are given back once: the ledger ends as
// it does when no reply is lost, on the in-process store and on Redis.
func TestLeaseReturnSentAgainIsNotGivenBackTwice(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	runs := 0
	run := func(t *testing.T, redis bool, lose int64, drop bool) (left int64, st localfirst.Stats) {
		runs++
		clk := clock.New(t0)
		var ledger localfirst.Ledger
		if redis {
			rs, err := redisstore.New(srv.Client(), redisstore.WithClock(clk), redisstore.WithMinTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = rs.Close() })
			ledger = rs
		} else {
			m, err := memstore.New(memstore.WithClock(clk))
			if err != nil {
				t.Fatal(err)
			}
			ledger = m
		}
		l := &lostReplies{Ledger: ledger, drop: drop}
		s, err := localfirst.New(ledger, l, localfirst.WithClock(clk), localfirst.WithManualSync())
		if err != nil {
			t.Fatal(err)
		}
		b := bucket("{return-"+strconv.Itoa(runs)+"}", quota.Leased, 1, 100)
		for range 40 {
			take(t, s, b)
			clk.Advance(10 * time.Millisecond)
		}
		if st := s.Stats(); st.Leases == 0 {
			t.Fatalf("no lease was taken: %+v", st)
		}
		l.lose.Store(lose)
		clk.Advance(time.Second) // the lease expires
		err = s.Sync(context.Background())
		if lose > 0 && err == nil {
			t.Fatal("the return whose reply was lost did not fail")
		}
		clk.Advance(10 * time.Millisecond)
		if err := s.Sync(context.Background()); err != nil {
			t.Fatalf("Sync after the lost reply: %v", err)
		}
		if err := s.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		return remainingOf(t, ledger, b), s.Stats()
	}
	for _, redis := range []bool{false, true} {
		name := "memstore"
		if redis {
			name = "redis"
		}
		t.Run(name, func(t *testing.T) {
			want, base := run(t, redis, 0, false)
			if base.ReturnedUnits == 0 {
				t.Fatalf("nothing was given back: %+v", base)
			}
			for _, drop := range []bool{false, true} {
				got, st := run(t, redis, 1, drop)
				if got != want || st.ReturnedUnits != base.ReturnedUnits || st.ReturnFailures != 1 {
					t.Errorf("reply lost (never arrived: %v): ledger has %d, %d returned, %d failed; with no loss %d and %d returned",
						drop, got, st.ReturnedUnits, st.ReturnFailures, want, base.ReturnedUnits)
				}
			}
		})
	}
}

// redisLedger is a Redis store over srv on clk, keys kept a minute at
// least, closed when the test ends: the exact store and ledger of the
// local-first tests over Redis.
func redisLedger(t *testing.T, srv *redistest.Server, clk *clock.Fake) *redisstore.Store {
	t.Helper()
	rs, err := redisstore.New(srv.Client(), redisstore.WithClock(clk), redisstore.WithMinTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	return rs
}
