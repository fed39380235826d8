package tiers_test

import (
	"context"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/localfirst"
)

// newLocalFirst returns a local-first store over a memstore, closed when
// the test ends.
func newLocalFirst(t testing.TB) *localfirst.Store {
	t.Helper()
	m := newMemstore(t)
	lf, err := localfirst.New(m, m)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lf.Close(context.Background()) })
	return lf
}

// wrapped is a store wrapper that forwards Take and says what it wraps,
// as the quota.Layers convention asks, and nothing else.
type wrapped struct{ inner quota.Store }

func (w wrapped) Take(ctx context.Context, b []quota.Bucket, r []quota.Result) (bool, error) {
	return w.inner.Take(ctx, b, r)
}
func (w wrapped) Unwrap() quota.Store { return w.inner }

// TestLocalModesNeedLocalFirst: a leased or async rule over a store with
// no local-first layer is refused, at construction and on a reload (the
// policy in force stays), naming the rule and localfirst; over a
// local-first store, or a wrapper of one, it is accepted and decided
// locally.
func TestLocalModesNeedLocalFirst(t *testing.T) {
	const local = `
rules:
  - {name: plain, key: [user], rate: 10/1s}
  - {name: tenants, key: [tenant], rate: 100/1s, consistency: async}
  - {name: users, key: [user], rate: 100/1s, consistency: leased}
`
	p := mustLoad(t, local)
	_, err := tiers.NewLimiter(newMemstore(t), p)
	if err == nil {
		t.Fatal("NewLimiter accepted leased and async rules over a bare memstore")
	}
	for _, want := range []string{`rules[1].consistency: rule "tenants" is async`, `rules[2].consistency: rule "users" is leased`, "localfirst.New"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), `"plain"`) {
		t.Errorf("error %q names the exact rule", err)
	}

	l := mustLimiter(t, newMemstore(t), "rules:\n  - {name: plain, key: [user], rate: 10/1s}\n")
	if err := l.SetPolicy(p); err == nil || !strings.Contains(err.Error(), "localfirst") {
		t.Fatalf("SetPolicy with local rules over a bare memstore: %v, want refused", err)
	}
	if n := len(l.Policy().Rules); n != 1 {
		t.Fatalf("after a refused reload the policy has %d rules, want the 1 in force", n)
	}

	for name, store := range map[string]quota.Store{"localfirst": newLocalFirst(t), "wrapper of localfirst": wrapped{newLocalFirst(t)}} {
		l, err := tiers.NewLimiter(store, p)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		d, _, err := l.Admit(context.Background(), &floodgate.Request{Identity: floodgate.Identity{Tenant: "acme"}})
		if err != nil || !d.Allowed || d.Source != floodgate.SourceAsync {
			t.Fatalf("%s: an async rule's request: %+v, %v; want allowed by async", name, d, err)
		}
	}
}
