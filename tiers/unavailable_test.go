package tiers_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/tiers"
)

// downStore is a Store whose backend is gone: every Take fails.
type downStore struct{ err error }

func (s downStore) Take(context.Context, []quota.Bucket, []quota.Result) (bool, error) {
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
	if d.Allowed || d.Source != floodgate.SourceFailClosed || d.Policy != "login" || d.RetryAfter != quota.StoreErrorRetryAfter {
		t.Fatalf("login: %+v, want fail-closed deny", d)
	}
	// "all" is open; "local" has no local fallback in front of this store
	// and fails open too. The binding one has the least remaining.
	d, _, err = l.Admit(context.Background(), &floodgate.Request{Method: "/a.B/C"})
	if err == nil || !d.Allowed || d.Source != floodgate.SourceFailOpen || d.Policy != "local" || d.Remaining != 9 {
		t.Fatalf("other: %+v, %v, want fail-open allow by local with 9 remaining and an error", d, err)
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

// TestShadowOnlyStoreErrorAllows: a request that only shadow rules match
// is allowed when the store fails, with the error; a shadow rule never
// denies. Admit used to return the zero Decision (a deny with no stage)
// here, while AdmitMany allowed.
func TestShadowOnlyStoreErrorAllows(t *testing.T) {
	down := downStore{errors.New("connection refused")}
	l := mustLimiter(t, down, `
shadow: true
rules:
  - {name: dry, key: [user], rate: 5/1m}
`)
	r := &floodgate.Request{Method: "/a.B/C", Priority: floodgate.PriorityRead, Identity: floodgate.Identity{User: "u"}}
	d, _, err := l.Admit(context.Background(), r)
	if !errors.Is(err, down.err) {
		t.Fatalf("err = %v, want the store's error wrapped", err)
	}
	if !d.Allowed || d.Stage != floodgate.StageTiers || d.Priority != floodgate.PriorityRead || d.Policy != "" {
		t.Fatalf("%+v: want the allowed decision of the tiers stage, binding no policy", d)
	}
	out := make([]floodgate.Decision, 1)
	md, err := l.AdmitMany(context.Background(), []tiers.Item{{Request: r}}, out)
	if !errors.Is(err, down.err) || !md.Allowed || !out[0].Allowed {
		t.Fatalf("AdmitMany: %+v %+v, %v: want allowed, with the store's error", md, out[0], err)
	}
}

// ctxStore fails a take with the caller's context error once that context
// has ended, as a store does whose call was cut short, and allows
// otherwise.
type ctxStore struct{}

func (ctxStore) Take(ctx context.Context, buckets []quota.Bucket, res []quota.Result) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	for i := range buckets {
		res[i] = quota.Result{Allowed: true, Limit: buckets[i].Limit.Capacity(), Remaining: buckets[i].Limit.Capacity() - buckets[i].Cost}
	}
	return true, nil
}

// TestCallerGoneIsNotFailOpen: a take that fails because the caller's
// context ended is denied, with the context's error, whatever the rule's
// on_store_error; an "open" rule admitted it before.
func TestCallerGoneIsNotFailOpen(t *testing.T) {
	l := mustLimiter(t, ctxStore{}, `
rules:
  - {name: all, rate: 100/1s, on_store_error: open}
`)
	ctx, cancel := context.WithCancel(context.Background())
	if d, _, err := l.Admit(ctx, &floodgate.Request{Method: "/a.B/C"}); err != nil || !d.Allowed {
		t.Fatalf("live caller: %+v, %v; want allowed", d, err)
	}
	cancel()
	d, done, err := l.Admit(ctx, &floodgate.Request{Method: "/a.B/C"})
	if d.Allowed || done != nil || !errors.Is(err, context.Canceled) || d.RetryAfter != 0 {
		t.Fatalf("caller gone: %+v, done %v, %v; want denied with RetryAfter 0 and an error wrapping context.Canceled", d, done != nil, err)
	}
}
