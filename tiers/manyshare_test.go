package tiers_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// TestAdmitManyRolloutShare: a rule's roll-out share (enforce_percent)
// follows each item's identity, so AdmitMany denies an item in the
// enforced share on an empty bucket, as Admit does, whatever the order of
// the items (items of a rule without key merged into one bucket, which
// kept the first item's share: an enforced item after one outside it was
// only a shadow charge, never denied).
func TestAdmitManyRolloutShare(t *testing.T) {
	clk := clock.New(time.Unix(1_800_000_000, 0))
	l := mustLimiter(t, newMemstore(t, memstore.WithClock(clk)), `
rules:
  - name: global
    rate: 2/1h
    enforce_percent: 50
`)
	ctx := context.Background()
	req := func(tenant string) *floodgate.Request {
		return &floodgate.Request{Method: "/s.S/M", Identity: floodgate.Identity{Tenant: tenant}}
	}
	for range 2 { // empty the one bucket, whatever the share
		if _, _, err := l.Admit(ctx, req("x")); err != nil {
			t.Fatal(err)
		}
	}
	var in, out *floodgate.Request
	for i := 0; i < 200 && (in == nil || out == nil); i++ {
		r := req("t" + strconv.Itoa(i))
		d, _, err := l.Admit(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case !d.Allowed && in == nil:
			in = r
		case d.Allowed && d.Shadow && out == nil:
			out = r
		}
	}
	if in == nil || out == nil {
		t.Fatal("no tenants found in and out of the share")
	}
	// Admit denies the enforced tenant on the empty bucket; so must AdmitMany,
	// whatever the order of the items.
	for _, items := range [][]tiers.Item{{{Request: in}, {Request: out}}, {{Request: out}, {Request: in}}} {
		dec := make([]floodgate.Decision, 2)
		d, err := l.AdmitMany(ctx, items, dec)
		k := 0
		if items[1].Request == in {
			k = 1
		}
		if d.Allowed || dec[k].Allowed {
			t.Errorf("enforced tenant %q at item %d on an empty bucket: call allowed %v (shadow %v), item allowed %v (shadow %v), err %v; want denied as Admit denies it",
				in.Identity.Tenant, k, d.Allowed, d.Shadow, dec[k].Allowed, dec[k].Shadow, err)
		}
	}
}
