package localfirst_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/localfirst"
	"github.com/floodgate-go/floodgate/tiers/memstore"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// TestOverRedis runs both local modes over a real redis-server as the
// ledger, on fake time: the same exact counts as over the in-process store.
func TestOverRedis(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.New(t0)
	rs, err := redisstore.New(srv.Client(), redisstore.WithClock(clk), redisstore.WithMinTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	s, err := localfirst.New(rs, rs, localfirst.WithClock(clk), localfirst.WithManualSync())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })

	for _, mode := range []tiers.Consistency{tiers.Leased, tiers.Async} {
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
	b := bucket("redis-async", tiers.Exact, 10, 10)
	res := make([]tiers.Result, 1)
	b.Cost = 0
	if _, err := rs.Take(context.Background(), []tiers.Bucket{b}, res); err != nil || res[0].Remaining != 0 {
		t.Fatalf("after Close the async bucket has %d left (%v), want 0", res[0].Remaining, err)
	}
}

// TestGroupedReportsOnCluster: on a Redis Cluster, the reports of keys in
// different slots go out as one report call (the store splits it by
// slot) and each key is charged exactly what was spent.
func TestGroupedReportsOnCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	c := redistest.StartCluster(t)
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
	var bs []tiers.Bucket
	for i := range keys {
		// Distinct hash tags: the keys spread over the cluster's slots.
		b := bucket("{k"+strconv.Itoa(i)+"}:async", tiers.Async, 1, 1000)
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
	res := make([]tiers.Result, 1)
	for _, b := range bs {
		b.Cost, b.Consistency = 0, tiers.Exact
		if _, err := rs.Take(context.Background(), []tiers.Bucket{b}, res); err != nil {
			t.Fatal(err)
		}
		if res[0].Remaining != 995 {
			t.Fatalf("%s: %d left, want 995 (full, less the 5 reported)", b.Key, res[0].Remaining)
		}
	}
}

// lostReplies is a ledger whose first lose report calls reach the store
// and are applied, and then fail as a timed-out call does: the reply
// never comes.
type lostReplies struct {
	localfirst.Ledger
	lose atomic.Int64
}

func (l *lostReplies) Report(ctx context.Context, r []tiers.Report, res []tiers.ReportResult) error {
	err := l.Ledger.Report(ctx, r, res)
	if l.lose.Add(-1) >= 0 {
		clear(res)
		return context.DeadlineExceeded
	}
	return err
}

// TestReportSentAgainIsNotChargedTwice: a report whose call reached the
// store but whose reply was lost is sent again with the hits that came
// since; the store charges the lost call's units once, on the in-process
// store and on Redis, whether one reply or two in a row were lost.
func TestReportSentAgainIsNotChargedTwice(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
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
		for _, lost := range []int64{1, 2} {
			t.Run(fmt.Sprintf("%s/%d_lost", tc.name, lost), func(t *testing.T) {
				clk := clock.New(t0)
				ledger := tc.ledger(clk)
				l := &lostReplies{Ledger: ledger}
				s, err := localfirst.New(ledger, l, localfirst.WithClock(clk), localfirst.WithManualSync())
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close(context.Background())
				// 1/s: the refill over the test is below one unit.
				b := bucket(fmt.Sprintf("{lost-%d}", lost), tiers.Async, 1, 100)
				for range 60 { // past half the share: due every quarter interval
					take(t, s, b)
				}
				l.lose.Store(lost)
				for range lost {
					clk.Advance(20 * time.Millisecond)
					if err := s.Sync(context.Background()); err == nil {
						t.Fatal("the report whose reply was lost did not fail")
					}
					take(t, s, b) // one more hit after each lost reply
				}
				clk.Advance(20 * time.Millisecond)
				if err := s.Sync(context.Background()); err != nil {
					t.Fatalf("report after the lost replies: %v", err)
				}
				// 60 + lost units spent, each charged once (the refill
				// over 60 ms is below a unit).
				if got, want := remainingOf(t, ledger, b), 100-60-lost; got != want {
					t.Fatalf("the ledger has %d left, want %d (the lost report charged twice?)", got, want)
				}
				if st := s.Stats(); st.ReportFailures != uint64(lost) || st.Reports != 1 || st.DebtUnits != 0 {
					t.Fatalf("stats %+v: want %d failed reports, then 1 without debt", st, lost)
				}
			})
		}
	}
}

// TestReportTimedOutOnAPausedRedis: a report sent to a Redis that is
// stopped (SIGSTOP) times out; when Redis continues, it may run the
// command left in its socket. Either way the next report charges each
// unit once.
func TestReportTimedOutOnAPausedRedis(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.New(t0)
	rs, err := redisstore.New(srv.Client(), redisstore.WithClock(clk), redisstore.WithMinTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	s, err := localfirst.New(rs, rs, localfirst.WithClock(clk), localfirst.WithManualSync(),
		localfirst.WithSyncTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	b := bucket("{paused}", tiers.Async, 1, 100)
	for range 60 { // past half the share: due every quarter interval
		take(t, s, b)
	}
	clk.Advance(20 * time.Millisecond)
	srv.Pause()
	err = s.Sync(context.Background())
	srv.Resume()
	if err == nil {
		t.Fatal("a report to a stopped Redis did not time out")
	}
	// Redis runs what it had read (or not) as soon as it continues.
	applied := false
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if remainingOf(t, rs, b) == 40 {
			applied = true
			break
		}
	}
	t.Logf("the timed-out report was applied by Redis after all: %v", applied)
	take(t, s, b)
	clk.Advance(20 * time.Millisecond)
	if err := s.Sync(context.Background()); err != nil {
		t.Fatalf("report after Redis continued: %v", err)
	}
	if got := remainingOf(t, rs, b); got != 39 {
		t.Fatalf("the ledger has %d left, want 39 (61 spent, each charged once)", got)
	}
}

// remainingOf reads a ledger's bucket without charging it.
func remainingOf(t *testing.T, st tiers.Store, b tiers.Bucket) int64 {
	t.Helper()
	b.Cost, b.Consistency = 0, tiers.Exact
	res := make([]tiers.Result, 1)
	if _, err := st.Take(context.Background(), []tiers.Bucket{b}, res); err != nil {
		t.Fatal(err)
	}
	return res[0].Remaining
}
