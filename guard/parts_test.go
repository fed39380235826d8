package guard

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"github.com/floodgate-go/floodgate/testing/redistest"
)

// TestKeyPrefix: with WithKeyPrefix every key the Guard writes in Redis,
// the rate limits' buckets and the fleet's member set, starts with the
// prefix, and two instances of one service under different prefixes
// (two environments on one Redis) do not count each other.
func TestKeyPrefix(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr()
	var gs []*Guard
	for _, prefix := range []string{"staging:", "prod:"} {
		g, err := New(context.Background(), WithRedisURL(url), WithService("shop"), WithLogger(quiet),
			WithPolicy([]byte(oneRule)), WithKeyPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close(context.Background())
		gs = append(gs, g)
	}
	h := httptest.NewServer(gs[0].HTTP(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	defer h.Close()
	if got := statuses(t, h.URL, 3); got[200] != 3 {
		t.Fatalf("statuses %v, want 3 admitted", got)
	}
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer client.Close()
	var keys []string
	waitFor(t, "a bucket key and both fleets' keys", func() bool {
		var err error
		keys, err = client.Keys(context.Background(), "*").Result()
		if err != nil {
			t.Fatal(err)
		}
		bucket := false
		for _, k := range keys {
			bucket = bucket || strings.HasPrefix(k, "staging:fg:") && !strings.Contains(k, "fleet")
		}
		return bucket && slices.Contains(keys, "staging:fg:fleet:{shop}") && slices.Contains(keys, "prod:fg:fleet:{shop}")
	})
	for _, k := range keys {
		if !strings.HasPrefix(k, "staging:") && !strings.HasPrefix(k, "prod:") {
			t.Errorf("key %q lacks the prefix (keys: %q)", k, keys)
		}
	}
	for i, g := range gs {
		if n := g.members.Count(); n != 1 {
			t.Errorf("instance %d counts %d instances; under its own prefix it is alone", i, n)
		}
	}
}

// TestFallbackAndBreakerChanges: in process there is no fallback; with
// Redis, Fallback is the store guarding it, whose breaker opens once
// Redis is killed, and WithOnBreakerChange is told closed -> open under
// the breaker's name, "redis".
func TestFallbackAndBreakerChanges(t *testing.T) {
	t.Parallel()
	g, err := New(context.Background(), WithInProcess(), WithLogger(quiet), WithPolicy([]byte(oneRule)))
	if err != nil {
		t.Fatal(err)
	}
	if g.Fallback() != nil {
		t.Error("in process: Fallback() is not nil")
	}
	g.Close(context.Background())

	srv := redistest.Start(t)
	var (
		mu      sync.Mutex
		changes []string
	)
	g, err = New(context.Background(), WithRedisURL("redis://"+srv.Addr()), WithService("shop"), WithLogger(quiet),
		WithPolicy([]byte(oneRule)), WithOnBreakerChange(func(name string, from, to gobreaker.State) {
			mu.Lock()
			changes = append(changes, name+": "+from.String()+" -> "+to.String())
			mu.Unlock()
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())
	fb := g.Fallback()
	if fb == nil {
		t.Fatal("with Redis: Fallback() is nil")
	}
	h := httptest.NewServer(g.HTTP(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	defer h.Close()
	statuses(t, h.URL, 2)
	if st := fb.Stats(); st.Calls == 0 || st.Failures != 0 {
		t.Errorf("with Redis up: %d calls, %d failed; want calls and no failure", st.Calls, st.Failures)
	}
	srv.Kill()
	waitFor(t, "the breaker open", func() bool {
		statuses(t, h.URL, 1)
		return fb.State() == gobreaker.StateOpen
	})
	if st := fb.Stats(); st.Failures == 0 || st.Opened != 1 {
		t.Errorf("after the kill: %d failures, opened %d times; want failures and one opening", st.Failures, st.Opened)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := "redis: closed -> open"; !slices.Contains(changes, want) {
		t.Errorf("breaker changes told %q, want %q among them", changes, want)
	}
}

// TestShedder: Shedder is the chain's first stage, configured by the
// policy's shedder: section (its capacity), or by the default without
// one.
func TestShedder(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		policy string
		want   int64
	}{
		{oneRule + "shedder: {capacity: 40}\n", 40},
		{oneRule, defaultShedStart},
	} {
		g, err := New(context.Background(), WithInProcess(), WithLogger(quiet), WithPolicy([]byte(tc.policy)))
		if err != nil {
			t.Fatal(err)
		}
		if got := g.Shedder().Capacity(); got != tc.want {
			t.Errorf("policy %q: shedder capacity %d, want %d", tc.policy, got, tc.want)
		}
		if typeName(g.chain[0]) != "*shedder.Shedder" || g.Shedder() == nil {
			t.Errorf("chain starts with %s", typeName(g.chain[0]))
		}
		g.Close(context.Background())
	}
}
