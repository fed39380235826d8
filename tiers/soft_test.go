package tiers_test

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

const softPolicy = `
rules:
  - {name: plan, key: [tenant], rate: 3/1m, soft: true}
  - {name: burst, key: [tenant], rate: 4/1m, soft: true}
  - {name: user, key: [user], rate: 6/1m}
`

// left reads what each rule's bucket of r holds, by rule name.
func left(t *testing.T, l *tiers.Limiter, r *floodgate.Request) map[string]int64 {
	t.Helper()
	bs, err := l.Inspect(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, b := range bs {
		out[b.Rule] = b.Remaining
	}
	return out
}

func sameLeft(t *testing.T, step string, got map[string]int64, want map[string]int64) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("%s: buckets %v, want %v", step, got, want)
		}
	}
}

// A soft rule admits what it would deny and marks it: within its limit it
// is charged like any rule; over it the request is admitted, charged
// nothing there, and named in SoftExceeded, while another soft rule still
// within its limit is charged. The hard rule binds every decision, and a
// hard deny charges nothing anywhere, soft rules included. On fake time,
// exact counts.
func TestSoftRules(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Time{})
	l := mustLimiter(t, newMemstore(t, memstore.WithClock(clk)), softPolicy)
	r := &floodgate.Request{Method: "/a.B/C", Identity: floodgate.Identity{Tenant: "acme", User: "ann"}}
	want := []string{"", "", "", "plan", "plan,burst", "plan,burst"}
	for i, soft := range want {
		d := admit(t, l, r)
		if !d.Allowed || d.SoftExceeded != soft || d.Policy != "user" || d.Remaining != int64(5-i) || d.Shadow {
			t.Fatalf("request %d: %+v, want allowed by user (remaining %d) with SoftExceeded %q", i+1, d, 5-i, soft)
		}
	}
	// plan counted the 3 it admitted within its limit, burst 4, user 6.
	sameLeft(t, "after 6", left(t, l, r), map[string]int64{"plan": 0, "burst": 0, "user": 0})
	d := admit(t, l, r)
	if d.Allowed || d.Policy != "user" || d.SoftExceeded != "" || d.RetryAfter != 10*time.Second {
		t.Fatalf("7th: %+v, want denied by user, retry after 10s, unmarked", d)
	}
	// 20s: plan and user refill 1, burst 1 (and a third of another).
	clk.Advance(20 * time.Second)
	sameLeft(t, "20s later", left(t, l, r), map[string]int64{"plan": 1, "burst": 1, "user": 2})
	// A hard deny charges the soft rules nothing: another user of the
	// tenant whose user bucket is empty.
	bob := &floodgate.Request{Method: "/a.B/C", Identity: floodgate.Identity{Tenant: "acme", User: "bob"}}
	for range 6 {
		admit(t, l, bob) // plan then burst go over; bob's bucket empties
	}
	clk.Advance(20 * time.Second)
	before := left(t, l, bob)
	if before["plan"] != 1 || before["user"] != 2 {
		t.Fatalf("bob's buckets %v", before)
	}
	// ann is admitted twice more, within plan and burst again.
	if d := admit(t, l, r); !d.Allowed || d.SoftExceeded != "" {
		t.Fatalf("ann after refill: %+v", d)
	}
	sameLeft(t, "ann charged", left(t, l, r), map[string]int64{"plan": 0, "burst": 0, "user": 3})
}

// A hard deny with soft rules still within their limits charges them
// nothing (all or nothing, as without soft rules).
func TestSoftHardDenyChargesNothing(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Time{})
	l := mustLimiter(t, newMemstore(t, memstore.WithClock(clk)), `
rules:
  - {name: plan, key: [tenant], rate: 10/1m, soft: true}
  - {name: user, key: [user], rate: 1/1m}
`)
	r := &floodgate.Request{Method: "/a.B/C", Identity: floodgate.Identity{Tenant: "acme", User: "ann"}}
	if d := admit(t, l, r); !d.Allowed || d.SoftExceeded != "" {
		t.Fatalf("first: %+v", d)
	}
	for range 3 {
		if d := admit(t, l, r); d.Allowed || d.Policy != "user" {
			t.Fatalf("denied by user: %+v", d)
		}
	}
	sameLeft(t, "after denies", left(t, l, r), map[string]int64{"plan": 9, "user": 0})
}

// A request cost above a soft rule's capacity is admitted and marked
// without a take at that rule; several items of AdmitMany are marked each
// by their own soft rules, and the call by all of them.
func TestSoftOverCapacityAndMany(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Time{})
	l := mustLimiter(t, newMemstore(t, memstore.WithClock(clk)), `
rules:
  - {name: tokens, key: [tenant], rate: 100/1m, soft: true}
  - {name: ip, key: [ip], rate: 1000/1m}
`)
	r := &floodgate.Request{Method: "/a.B/C", Cost: 150, Identity: floodgate.Identity{Tenant: "acme", IP: netip.MustParseAddr("192.0.2.1")}}
	d, _, err := l.Admit(context.Background(), r)
	if err != nil || !d.Allowed || d.SoftExceeded != "tokens" || d.Policy != "ip" || d.Remaining != 850 {
		t.Fatalf("cost 150: %+v, %v", d, err)
	}
	sameLeft(t, "over capacity", left(t, l, r), map[string]int64{"tokens": 100, "ip": 850})

	a := &floodgate.Request{Method: "/a.B/C", Cost: 60, Identity: floodgate.Identity{Tenant: "a", IP: netip.MustParseAddr("192.0.2.2")}}
	b := &floodgate.Request{Method: "/a.B/C", Cost: 60, Identity: floodgate.Identity{Tenant: "b", IP: netip.MustParseAddr("192.0.2.2")}}
	out := make([]floodgate.Decision, 3)
	// a twice: 120 on a's tokens, over; b once: within.
	whole, err := l.AdmitMany(context.Background(), []tiers.Item{{Request: a}, {Request: a}, {Request: b}}, out)
	if err != nil || !whole.Allowed || whole.SoftExceeded != "tokens" {
		t.Fatalf("AdmitMany: %+v, %v", whole, err)
	}
	if out[0].SoftExceeded != "tokens" || out[1].SoftExceeded != "tokens" || out[2].SoftExceeded != "" {
		t.Fatalf("items: %q %q %q", out[0].SoftExceeded, out[1].SoftExceeded, out[2].SoftExceeded)
	}
	sameLeft(t, "a", left(t, l, a), map[string]int64{"tokens": 100, "ip": 820})
	sameLeft(t, "b", left(t, l, b), map[string]int64{"tokens": 40})
}

// When the store fails, a soft rule whose on_store_error denies marks the
// request instead; a hard one denies it.
func TestSoftStoreError(t *testing.T) {
	t.Parallel()
	down := errors.New("down")
	l := mustLimiter(t, failingStore{down}, `
rules:
  - {name: plan, key: [tenant], rate: 10/1m, soft: true, on_store_error: closed}
  - {name: user, key: [user], rate: 10/1m, on_store_error: open}
`)
	r := &floodgate.Request{Method: "/a.B/C", Identity: floodgate.Identity{Tenant: "acme", User: "ann"}}
	d, _, err := l.Admit(context.Background(), r)
	if !errors.Is(err, down) || !d.Allowed || d.SoftExceeded != "plan" || d.Source != floodgate.SourceFailOpen {
		t.Fatalf("%+v, %v", d, err)
	}
}

// Mistakes in soft rules are load errors naming the field and its line.
func TestSoftLoadErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ policy, want string }{
		{"rules:\n  - name: a\n    rate: 1/1s\n    soft: yes please\n", `rules[0].soft: `},
		{"rules:\n  - name: a\n    rate: 1/1s\n    shadow: true\n    soft: true\n", "rules[0].soft: a rule is soft (admit and mark) or shadow (report only), not both: remove one, at line 5"},
		{"rules:\n  - name: a\n    key: [user]\n    rate: 1/1s\n    soft: true\n    enforce_percent: 10\n", "rules[0].soft: a soft rule denies nothing, so it has no share to enforce: remove enforce_percent, at line 5"},
		{"rules:\n  - name: a\n    rate: 1/1s\n    soft: true\n    max_wait: 1s\n", "rules[0].soft: a soft rule admits a request over its limit at once, so it never waits: remove max_wait, at line 4"},
	} {
		_, err := tiers.Load([]byte(tc.policy))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.policy, err, tc.want)
		}
	}
	// In a shadow policy a soft rule is a shadow rule: it reports, never
	// marks.
	l := mustLimiter(t, newMemstore(t), "shadow: true\nrules:\n  - {name: a, rate: 1/1h, soft: true}\n")
	r := &floodgate.Request{Method: "/a.B/C"}
	admit(t, l, r)
	if d := admit(t, l, r); !d.Allowed || !d.Shadow || d.SoftExceeded != "" || d.Policy != "a" {
		t.Fatalf("shadow policy: %+v", d)
	}
}

// Available reads every alternative's buckets in one take and returns
// exactly those with quota for the request, charging nothing: a per-model
// rule for each model and a per-tenant rule they share, a soft rule that
// marks instead of excluding.
func TestAvailable(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Time{})
	st := &countingStore{Store: newMemstore(t, memstore.WithClock(clk))}
	l := mustLimiter(t, st, availablePolicy)
	testAvailable(t, l, clk, func() int { return int(st.takes.Load()) })
}

const availablePolicy = `
rules:
  - {name: model, key: [tenant, header:x-model], rate: 2/1m, match: {header: {x-model: [big, mid]}}}
  - {name: small, key: [tenant, header:x-model], rate: 5/1m, soft: true, match: {header: {x-model: [small]}}}
  - {name: tenant, key: [tenant], rate: 20/1m}
`

func modelReq(model string, cost int64) *floodgate.Request {
	return &floodgate.Request{Method: "/llm.v1.LLM/Complete", Cost: cost, Identity: floodgate.Identity{Tenant: "acme"},
		Headers: []floodgate.Header{{Name: "x-model", Value: model}}}
}

// testAvailable runs the Available scenario on l, whose store's clock is
// clk; takes counts the store's round trips.
func testAvailable(t *testing.T, l *tiers.Limiter, clk *clock.Fake, takes func() int) {
	t.Helper()
	models := []string{"big", "mid", "small"}
	alts := func(cost int64) []tiers.Item {
		var items []tiers.Item
		for _, m := range models {
			items = append(items, tiers.Item{Request: modelReq(m, cost)})
		}
		return items
	}
	check := func(step string, cost int64, wantAllowed []bool, wantSoft []string) {
		t.Helper()
		out := make([]floodgate.Decision, len(models))
		before := takes()
		n, err := l.Available(context.Background(), alts(cost), out)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if got := takes() - before; got != 1 {
			t.Fatalf("%s: %d store takes, want 1", step, got)
		}
		count := 0
		for i := range models {
			if out[i].Allowed != wantAllowed[i] || out[i].SoftExceeded != wantSoft[i] {
				t.Fatalf("%s: %s: %+v, want allowed %v, soft %q", step, models[i], out[i], wantAllowed[i], wantSoft[i])
			}
			if wantAllowed[i] {
				count++
			}
		}
		if n != count {
			t.Fatalf("%s: n = %d, want %d", step, n, count)
		}
	}
	check("fresh", 1, []bool{true, true, true}, []string{"", "", ""})
	check("cost 3", 3, []bool{false, false, true}, []string{"", "", ""})
	// big is spent: 2 calls.
	for range 2 {
		if d, _, err := l.Admit(context.Background(), modelReq("big", 1)); err != nil || !d.Allowed {
			t.Fatalf("admit big: %+v %v", d, err)
		}
	}
	check("big spent", 1, []bool{false, true, true}, []string{"", "", ""})
	check("nothing was charged", 1, []bool{false, true, true}, []string{"", "", ""})
	for range 5 {
		if d, _, err := l.Admit(context.Background(), modelReq("small", 1)); err != nil || !d.Allowed {
			t.Fatalf("admit small: %+v %v", d, err)
		}
	}
	check("small over its soft limit", 1, []bool{false, true, true}, []string{"", "", "small"})
	// The tenant's 20 has 13 left: cost 13 fits, 14 does not, anywhere.
	check("tenant 13", 13, []bool{false, false, true}, []string{"", "", "small"})
	check("tenant 14", 14, []bool{false, false, false}, []string{"", "", ""})
	clk.Advance(30 * time.Second) // big refills 1
	check("30s later", 1, []bool{true, true, true}, []string{"", "", ""})
}

// Bad input to Available is an error naming it, and reads nothing.
func TestAvailableBadInput(t *testing.T) {
	t.Parallel()
	st := &countingStore{Store: newMemstore(t)}
	l := mustLimiter(t, st, availablePolicy)
	out := make([]floodgate.Decision, 1)
	for _, tc := range []struct {
		alts []tiers.Item
		want string
	}{
		{[]tiers.Item{{}}, "alts[0].Request is nil"},
		{[]tiers.Item{{Request: modelReq("big", -1)}}, "negative"},
		{[]tiers.Item{{Request: modelReq("big", 1), Rule: "nope"}}, `alts[0].Rule "nope"`},
		{[]tiers.Item{{Request: modelReq("big", 1)}, {Request: modelReq("mid", 1)}}, "out has room for 1"},
	} {
		if _, err := l.Available(context.Background(), tc.alts, out); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v, want %q", err, tc.want)
		}
	}
	if st.takes.Load() != 0 {
		t.Fatalf("%d takes for bad input", st.takes.Load())
	}
}

// Under AdmitAtMost a soft rule within its limit shares the grant (and
// caps it at what it has left); one with nothing left is passed over,
// the request granted what the hard rules give and marked.
func TestSoftAtMost(t *testing.T) {
	t.Parallel()
	l := mustLimiter(t, newMemstore(t, memstore.WithClock(clock.New(time.Time{}))), `
rules:
  - {name: tokens, key: [tenant], rate: 10/1m, soft: true}
  - {name: ip, key: [ip], rate: 100/1m}
`)
	r := &floodgate.Request{Method: "/a.B/C", Cost: 8, Identity: floodgate.Identity{Tenant: "acme", IP: netip.MustParseAddr("192.0.2.1")}}
	for i, want := range []struct {
		granted int64
		soft    string
	}{{8, ""}, {2, ""}, {8, "tokens"}} {
		g, d, err := l.AdmitAtMost(context.Background(), r)
		if err != nil || !d.Allowed || g != want.granted || d.SoftExceeded != want.soft {
			t.Fatalf("call %d: granted %d, %+v, %v; want %d, soft %q", i+1, g, d, err, want.granted, want.soft)
		}
	}
	sameLeft(t, "after", left(t, l, r), map[string]int64{"tokens": 0, "ip": 82})
}

// A soft rule that settles (token billing) is settled when its take
// charged it, into debt like any settling rule, and not when the request
// was over it (charged nothing, nothing to settle).
func TestSoftSettle(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Time{})
	l := mustLimiter(t, newMemstore(t, memstore.WithClock(clk)), `
rules:
  - {name: tokens, key: [tenant], rate: 100/1h, soft: true, settle: true}
  - {name: ip, key: [ip], rate: 1000/1h, settle: true}
`)
	r := &floodgate.Request{Method: "/a.B/C", Cost: 10, Identity: floodgate.Identity{Tenant: "acme", IP: netip.MustParseAddr("192.0.2.1")}}
	step := func(name string, actual int64, soft string, want map[string]int64) {
		t.Helper()
		d, done, err := l.Admit(context.Background(), r)
		if err != nil || !d.Allowed || d.SoftExceeded != soft || done == nil {
			t.Fatalf("%s: %+v, %v, done %v; want allowed, soft %q", name, d, err, done != nil, soft)
		}
		done(floodgate.Result{Outcome: floodgate.OutcomeSuccess, Cost: actual, HasCost: true})
		sameLeft(t, name, left(t, l, r), want)
	}
	step("within", 90, "", map[string]int64{"tokens": 10, "ip": 910})
	step("within, into debt", 30, "", map[string]int64{"tokens": 0, "ip": 880}) // 20 in debt
	step("over", 50, "tokens", map[string]int64{"tokens": 0, "ip": 830})
	// 18 minutes refill 30 tokens: 10 after the debt of 20 (70 of debt,
	// had the request over the rule been settled there, would leave 0).
	clk.Advance(18 * time.Minute)
	sameLeft(t, "18m later", left(t, l, r), map[string]int64{"tokens": 10})
}
