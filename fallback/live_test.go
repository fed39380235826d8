package fallback_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/fallback"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// Tests against real redis-server processes, each started on a free
// loopback port (testing/redistest). Those here, in the fast tier,
// assert what a fault does, never how long anything took: a healthy call
// has a budget no loaded machine comes near, and a stopped or killed
// server is what makes a call fail. The fault tests that measure time
// under load are in live_system_test.go (build tag system).

// Bucket kinds the load cycles through.
const (
	kindLocal = iota
	kindClosed
	kindOpen
	numKinds
)

// liveBuckets: a tight FailLocal bucket (200/s, burst 20), and two generous
// ones the store always allows, FailClosed (login) and FailOpen (search).
var liveBuckets = [numKinds]quota.Bucket{
	kindLocal: {Key: "live:{u1}:api", Limit: quota.Limit{Algorithm: quota.TokenBucket, Rate: 200, Period: time.Second, Burst: 20}, Cost: 1, OnStoreError: quota.FailLocal},
	kindClosed: {Key: "live:{u1}:login", Limit: quota.Limit{Algorithm: quota.TokenBucket, Rate: 1_000_000, Period: time.Second, Burst: 1_000_000}, Cost: 1,
		OnStoreError: quota.FailClosed},
	kindOpen: {Key: "live:{u1}:search", Limit: quota.Limit{Algorithm: quota.TokenBucket, Rate: 1_000_000, Period: time.Second, Burst: 1_000_000}, Cost: 1,
		OnStoreError: quota.FailOpen},
}

func init() {
	// go-redis logs every failed dial; the fault tests make hundreds.
	redis.SetLogger(quietLogger{})
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// liveStore builds the guarded Redis store. The go-redis client honours
// context deadlines (ContextTimeoutEnabled), which the fallback's timeout
// relies on, and retries a dead pooled connection without backoff. Its
// read and write timeouts are longer than any pause these tests make, so
// that a call's budget, not the client, ends a call to a stopped server,
// and a pipeline the store's batcher sent before a pause is answered when
// the pause ends (the late answers the fallback reconciles).
func liveStore(t *testing.T, srv *redistest.Server, opts ...fallback.Option) (*fallback.Store, *stateLog) {
	t.Helper()
	client := redis.NewClient(&redis.Options{
		Addr:                  srv.Addr(),
		ContextTimeoutEnabled: true,
		DialTimeout:           time.Second,
		ReadTimeout:           10 * time.Second,
		WriteTimeout:          10 * time.Second,
		MaxRetries:            2,
		MinRetryBackoff:       -1,
		MaxRetryBackoff:       -1,
		// One dial attempt per command: the breaker is the retry policy.
		// go-redis stops dialing once failed dials reach PoolSize (until
		// a background dial succeeds, polled every second), which would
		// delay recovery; a pool larger than the dials an outage makes
		// keeps it dialing.
		DialerRetries: 1,
		PoolSize:      256,
	})
	t.Cleanup(func() { _ = client.Close() })
	primary, err := redisstore.New(client)
	if err != nil {
		t.Fatalf("redisstore.New: %v", err)
	}
	t.Cleanup(func() { _ = primary.Close() })
	sl := &stateLog{}
	all := append([]fallback.Option{
		fallback.WithLogger(slog.New(slog.NewTextHandler(testWriter{t}, nil))),
		fallback.WithOnStateChange(sl.record),
	}, opts...)
	s, err := fallback.New(primary, all...)
	if err != nil {
		t.Fatalf("fallback.New: %v", err)
	}
	return s, sl
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

type stateChange struct {
	at       time.Time
	from, to gobreaker.State
}

type stateLog struct {
	mu sync.Mutex
	ch []stateChange
}

func (sl *stateLog) record(_ string, from, to gobreaker.State) {
	sl.mu.Lock()
	sl.ch = append(sl.ch, stateChange{time.Now(), from, to})
	sl.mu.Unlock()
}

func (sl *stateLog) changes() []stateChange {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	return append([]stateChange(nil), sl.ch...)
}

// waitFor polls cond every millisecond for at most d.
func waitFor(d time.Duration, cond func() bool) bool {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if cond() {
			return true
		}
		time.Sleep(time.Millisecond)
	}
	return cond()
}

// TestLiveNoScriptDoesNotTrip empties the script cache (SCRIPT FLUSH, then a
// restart) under a breaker that opens on the first failure: the Redis store
// answers NOSCRIPT by re-sending the script, so no failure is counted. The
// call budget (a minute) is one no healthy call comes near on a loaded
// machine: a take decided locally here can only be NOSCRIPT's doing.
func TestLiveNoScriptDoesNotTrip(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	t.Parallel()
	srv := redistest.Start(t)
	s, sl := liveStore(t, srv, fallback.WithTimeout(healthyBudget), fallback.WithFailures(1), fallback.WithOpenInterval(time.Hour))
	b := []quota.Bucket{liveBuckets[kindClosed]}
	takeStore := func(phase string) {
		t.Helper()
		for i := 0; i < 3; i++ {
			res := make([]quota.Result, 1)
			ok, err := s.Take(context.Background(), b, res)
			if err != nil || !ok || res[0].Source != floodgate.SourceStore {
				t.Fatalf("%s take %d: allowed=%v err=%v %+v, want allowed by the store", phase, i, ok, err, res[0])
			}
		}
	}
	takeStore("before")
	srv.ScriptFlush()
	takeStore("after SCRIPT FLUSH")
	srv.Restart()
	takeStore("after restart")
	if st := s.Stats(); st.Failures != 0 || st.State != gobreaker.StateClosed || len(sl.changes()) != 0 {
		t.Fatalf("stats %+v, changes %v: NOSCRIPT counted against the store", st, sl.changes())
	}
}

// TestLiveCauses: the cause a failed call is counted under matches the
// fault: a killed Redis refuses, a paused one times out, a full one
// (maxmemory, noeviction) answers OOM. The store under test calls Redis
// only while the fault is on (another store loaded the script), so every
// call it makes fails, by the fault: a paused server never answers within
// the 20ms budget, however loaded the machine.
func TestLiveCauses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	t.Parallel()
	b := []quota.Bucket{liveBuckets[kindOpen]}
	for _, tc := range []struct {
		cause string
		fault func(*redistest.Server)
		heal  func(*redistest.Server)
	}{
		{fallback.CauseOOM, func(srv *redistest.Server) {
			c := srv.Client()
			if err := c.FlushAll(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			if err := c.ConfigSet(context.Background(), "maxmemory-policy", "noeviction").Err(); err != nil {
				t.Fatal(err)
			}
			if err := c.ConfigSet(context.Background(), "maxmemory", "1").Err(); err != nil {
				t.Fatal(err)
			}
		}, nil},
		{fallback.CauseTimeout, func(srv *redistest.Server) { srv.Pause() }, func(srv *redistest.Server) { srv.Resume() }},
		{fallback.CauseRefused, func(srv *redistest.Server) { srv.Kill() }, nil},
	} {
		t.Run(tc.cause, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			warm, _ := liveStore(t, srv, fallback.WithTimeout(healthyBudget))
			if ok, res := take(t, warm, b[0]); !ok || res[0].Source != floodgate.SourceStore {
				t.Fatalf("healthy take (loads the script): %v %+v", ok, res[0])
			}
			s, _ := liveStore(t, srv, fallback.WithTimeout(20*time.Millisecond), fallback.WithSlowGrace(time.Nanosecond))
			tc.fault(srv)
			if tc.heal != nil {
				defer tc.heal(srv)
			}
			for range 3 {
				if ok, res := take(t, s, b[0]); !ok || res[0].Source != floodgate.SourceFailOpen {
					t.Fatalf("take during the fault: %v %+v, want allowed by fail_open", ok, res[0])
				}
			}
			st := s.Stats()
			if st.Causes[tc.cause] != 3 || len(st.Causes) != 1 {
				t.Fatalf("causes %v, want only %s, 3 times", st.Causes, tc.cause)
			}
		})
	}
}
