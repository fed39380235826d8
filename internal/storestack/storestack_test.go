package storestack

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	fgotel "github.com/floodgate-go/floodgate/otel"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func observer(t *testing.T) *fgotel.Observer {
	t.Helper()
	obs, err := fgotel.New()
	if err != nil {
		t.Fatal(err)
	}
	return obs
}

// tenPerHour is a token bucket of 10 an hour, burst 10, decided exactly (through
// the fallback), or locally and reported later with consistency.
func tenPerHour(key string, consistency quota.Consistency) quota.Bucket {
	b := quota.Bucket{Key: key, Rule: "r", Cost: 1, Limit: quota.Limit{Algorithm: quota.TokenBucket, Rate: 10, Period: time.Hour, Burst: 10}, Consistency: consistency}
	if consistency == quota.Async {
		b.SyncInterval = time.Hour // reported at Close, not before
	}
	return b
}

// admits takes b n times and counts the takes allowed.
func admits(t *testing.T, s quota.Store, b quota.Bucket, n int) int {
	t.Helper()
	res := make([]quota.Result, 1)
	got := 0
	for range n {
		ok, err := s.Take(context.Background(), []quota.Bucket{b}, res)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			got++
		}
	}
	return got
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 20s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestBadConfig(t *testing.T) {
	obs := observer(t)
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Observer: obs}, "give exactly one of InProcess, URL and Client (0 given)"},
		{Config{InProcess: true, URL: "redis://x", Observer: obs}, "(2 given)"},
		{Config{InProcess: true}, "nil Observer"},
		{Config{URL: "redis://127.0.0.1:1", Service: "s", Instances: -1, Observer: obs}, "Instances -1 is negative"},
		{Config{URL: "redis://127.0.0.1:1", Service: "s", KeyPrefix: "a{b}", Observer: obs}, `KeyPrefix "a{b}" holds '{' or '}'`},
		{Config{InProcess: true, KeyPrefix: "p:", Observer: obs}, "need Redis"},
		{Config{URL: "redis://127.0.0.1:1", Observer: obs}, "Service is required"},
		{Config{URL: "nope://x", Service: "s", Observer: obs}, `redis URL: redisstore: NewClient: "nope://x"`},
	} {
		if _, err := New(context.Background(), c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one holding %q", c.cfg, err, c.want)
		}
	}
}

func TestInProcess(t *testing.T) {
	st, err := New(context.Background(), Config{InProcess: true, Observer: observer(t), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if st.Desc != "in process" || st.Fallback != nil || st.Members != nil || st.Client != nil || st.Ledger == nil {
		t.Errorf("in process: %+v", st)
	}
	if got := admits(t, st.Store, tenPerHour("k", quota.Exact), 12); got != 10 {
		t.Errorf("admitted %d of 12, want 10", got)
	}
	if err := st.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestCloseHandsOverBeforeTheClientCloses: what the local-first store
// admitted on its own (an async bucket, reported hourly) reaches Redis
// at Close, through the client New made, which closes after it.
func TestCloseHandsOverBeforeTheClientCloses(t *testing.T) {
	srv := redistest.Start(t)
	st, err := New(context.Background(), Config{URL: "redis://" + srv.Addr(), Service: "s", KeyPrefix: "env:", Observer: observer(t), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if want := "Redis at redis://" + srv.Addr() + " (circuit breaker, local fallback shared by the live instances of s)"; st.Desc != want {
		t.Errorf("Desc %q, want %q", st.Desc, want)
	}
	if got := admits(t, st.Store, tenPerHour("fg:{r}:token_bucket", quota.Async), 3); got != 3 {
		t.Fatalf("admitted %d of 3", got)
	}
	if err := st.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// The 3 units are charged in Redis, under the prefix: 6 of 10 left
	// after one more.
	rs, err := redisstore.New(srv.Client(), redisstore.WithPrefix("env:"))
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	res := make([]quota.Result, 1)
	if _, err := rs.Take(context.Background(), []quota.Bucket{tenPerHour("fg:{r}:token_bucket", quota.Exact)}, res); err != nil {
		t.Fatal(err)
	}
	if res[0].Remaining != 6 {
		t.Errorf("after Close, Redis leaves %d of 10 after one more, want 6 (the 3 admitted locally handed over)", res[0].Remaining)
	}
	if n, _ := srv.Client().Exists(context.Background(), "env:fg:fleet:{s}").Result(); n != 0 {
		t.Error("Close left the fleet's member set in Redis with this instance in it")
	}
}

// TestLiveMembership: two stacks of one service on one Redis count 2
// (one of another service 1), and with Redis gone they admit each limit
// once between them; a fixed Instances is that count, whoever is live.
func TestLiveMembership(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr()
	var stacks []*Stack
	for _, c := range []Config{{Service: "rls"}, {Service: "rls"}, {Service: "other"}, {Service: "rls", Instances: 3}} {
		c.URL, c.Observer, c.Logger, c.Timeout = url, observer(t), quiet, 50*time.Millisecond
		st, err := New(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close(context.Background())
		stacks = append(stacks, st)
	}
	waitFor(t, "a count of 2 rls instances", func() bool { return stacks[0].Members.Count() == 2 && stacks[1].Members.Count() == 2 })
	if n := stacks[2].Members.Count(); n != 1 {
		t.Errorf("the other service counts %d instances, want 1", n)
	}
	if stacks[3].Members != nil || !strings.Contains(stacks[3].Desc, "shared by 3 instances (fixed)") {
		t.Errorf("a fixed count: Members %v, Desc %q", stacks[3].Members, stacks[3].Desc)
	}
	srv.Kill()
	b := tenPerHour("fg:{r}:token_bucket", quota.Exact)
	both := admits(t, stacks[0].Store, b, 10) + admits(t, stacks[1].Store, b, 10)
	if both != 10 {
		t.Errorf("with Redis down the 2 live instances admitted %d of 20, want 10 (5 each)", both)
	}
	if got := admits(t, stacks[3].Store, b, 10); got != 3 {
		t.Errorf("with Redis down the stack of 3 fixed instances admitted %d of 10, want 3", got)
	}
}
