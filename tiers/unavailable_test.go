package tiers_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/tiers"
)

// downStore is a Store whose backend is gone: every Take fails.
type downStore struct{ err error }

func (s downStore) Take(context.Context, []tiers.Bucket, []tiers.Result) (bool, error) {
	return false, s.err
}

// decidingStore is a down store that says it decides on_store_error itself,
// as a fallback store does.
type decidingStore struct{ downStore }

func (decidingStore) DecidesOnStoreError() bool { return true }

func TestStoreErrorFailModes(t *testing.T) {
	down := downStore{errors.New("connection refused")}
	l := mustLimiter(t, down, `
rules:
  - {name: login, match: {method: /auth.v1.Auth/Login}, rate: 5/1m, on_store_error: closed}
  - {name: all, rate: 100/1s, on_store_error: open}
  - {name: local, rate: 10/1s}
`)
	d, _, err := l.Admit(context.Background(), &floodgate.Request{Method: "/auth.v1.Auth/Login"})
	if err == nil || !errors.Is(err, down.err) {
		t.Fatalf("err = %v, want the store's error wrapped", err)
	}
	if d.Allowed || d.Source != floodgate.SourceFailClosed || d.Policy != "login" || d.RetryAfter != tiers.StoreErrorRetryAfter {
		t.Fatalf("login: %+v, want fail-closed deny", d)
	}
	// "all" is open; "local" has no local fallback in front of this store
	// and fails open too. The binding one has the least remaining.
	d, _, err = l.Admit(context.Background(), &floodgate.Request{Method: "/a.B/C"})
	if err == nil || !d.Allowed || d.Source != floodgate.SourceFailOpen || d.Policy != "local" || d.Remaining != 9 {
		t.Fatalf("other: %+v, %v, want fail-open allow by local with 9 remaining and an error", d, err)
	}
}

// TestDecideUnavailable: the fail modes, decided in one place, exactly.
func TestDecideUnavailable(t *testing.T) {
	tb := func(key string, burst, cost int64, mode tiers.FailMode) tiers.Bucket {
		return tiers.Bucket{Key: key, Rule: key, Cost: cost, OnStoreError: mode,
			Limit: tiers.Limit{Algorithm: tiers.TokenBucket, Rate: burst, Period: time.Second, Burst: burst}}
	}
	open, closed, local := tb("open", 10, 3, tiers.FailOpen), tb("closed", 5, 1, tiers.FailClosed), tb("local", 4, 1, tiers.FailLocal)
	tooBig := tb("big", 2, 3, tiers.FailOpen)

	res := make([]tiers.Result, 3)
	if !tiers.DecideUnavailable([]tiers.Bucket{open}, res, nil) {
		t.Fatal("open bucket denied")
	}
	if want := (tiers.Result{Allowed: true, Limit: 10, Remaining: 7, Source: floodgate.SourceFailOpen}); res[0] != want {
		t.Errorf("open: %+v, want %+v", res[0], want)
	}

	// A closed bucket denies the whole take; the local decider is told
	// the take cannot pass, so it charges nothing.
	var sawAllowed []bool
	localFn := func(bs []tiers.Bucket, rs []tiers.Result, allowed bool) bool {
		sawAllowed = append(sawAllowed, allowed)
		for i := range bs {
			if bs[i].OnStoreError == tiers.FailLocal {
				if rs[i].Source != floodgate.SourceLocalFallback || rs[i].Limit != bs[i].Limit.Capacity() {
					t.Errorf("local bucket preset %+v", rs[i])
				}
				rs[i].Allowed = allowed
			}
		}
		return allowed
	}
	if tiers.DecideUnavailable([]tiers.Bucket{open, closed, local}, res, localFn) {
		t.Fatal("a closed bucket did not deny")
	}
	if want := (tiers.Result{Limit: 5, RetryAfter: tiers.StoreErrorRetryAfter, Reset: tiers.StoreErrorRetryAfter, Source: floodgate.SourceFailClosed}); res[1] != want {
		t.Errorf("closed: %+v, want %+v", res[1], want)
	}
	if len(sawAllowed) != 1 || sawAllowed[0] {
		t.Errorf("local decider saw allowed=%v, want one call with false", sawAllowed)
	}

	// A cost above capacity denies with Never whatever the mode.
	if tiers.DecideUnavailable([]tiers.Bucket{tooBig}, res, nil) || res[0].RetryAfter != tiers.Never {
		t.Errorf("cost above capacity: %+v", res[0])
	}

	// Without a local decider, local acts as open.
	if !tiers.DecideUnavailable([]tiers.Bucket{local}, res, nil) || res[0].Source != floodgate.SourceFailOpen || res[0].Remaining != 3 {
		t.Errorf("local without a decider: %+v", res[0])
	}
}

// TestLocalWithoutFallbackWarns: a rule with on_store_error local over a
// store that cannot decide locally is reported at construction and on
// every policy load, once per rule; over a store that decides (a fallback
// store) it is not.
func TestLocalWithoutFallbackWarns(t *testing.T) {
	var buf bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })

	const policy = `
rules:
  - {name: tenant, key: [tenant], rate: 10/1s}
  - {name: login, key: [ip], rate: 5/1m, on_store_error: closed}
`
	mustLimiter(t, decidingStore{downStore{errors.New("down")}}, policy)
	if buf.Len() != 0 {
		t.Fatalf("warned over a store that decides locally: %s", buf.String())
	}
	mustLimiter(t, downStore{errors.New("down")}, policy)
	out := buf.String()
	if strings.Count(out, "no local fallback") != 1 || !strings.Contains(out, "rule=tenant") || strings.Contains(out, "rule=login") {
		t.Fatalf("warnings = %q, want one for rule tenant", out)
	}
}
