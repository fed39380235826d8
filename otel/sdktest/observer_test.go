package sdktest

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/floodgate-go/floodgate"
	fgotel "github.com/floodgate-go/floodgate/otel"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// stage is a scripted stage: it returns the same decision and error every
// time. The Observer's input is decisions, so scripted stages exercise it
// exactly; the real stages are tested in their own packages.
func stage(d floodgate.Decision, err error) floodgate.Admitter {
	return floodgate.AdmitFunc(func(context.Context, *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
		if d.Allowed {
			return d, func(floodgate.Result) {}, err
		}
		return d, nil, err
	})
}

var (
	shedAllow = floodgate.Decision{Allowed: true, Stage: floodgate.StageShedder, Source: floodgate.SourceShedder,
		Limit: 100, Remaining: 60, Priority: floodgate.PriorityRead}
	concAllow = floodgate.Decision{Allowed: true, Stage: floodgate.StageConcurrency, Source: floodgate.SourceConcurrency,
		Policy: "concurrency", Limit: 20, Remaining: 19}
	tiersAllow = floodgate.Decision{Allowed: true, Stage: floodgate.StageTiers, Source: floodgate.SourceStore,
		Policy: "search", Limit: 20, Remaining: 19, Window: time.Second, Reset: 50 * time.Millisecond}
	tiersDeny = floodgate.Decision{Stage: floodgate.StageTiers, Source: floodgate.SourceStore,
		Policy: "search", Limit: 20, Remaining: 0, Window: time.Second, Reset: time.Second, RetryAfter: 1500 * time.Millisecond}
	shedDeny = floodgate.Decision{Stage: floodgate.StageShedder, Source: floodgate.SourceShedder,
		Policy: "shedder", Limit: 100, Remaining: 0, RetryAfter: 2 * time.Second, Priority: floodgate.PriorityTest}
	concDeny = floodgate.Decision{Stage: floodgate.StageConcurrency, Source: floodgate.SourceConcurrency,
		Policy: "concurrency", Limit: 20, Remaining: 0, RetryAfter: 250 * time.Millisecond}
)

func with(d floodgate.Decision, f func(*floodgate.Decision)) floodgate.Decision {
	f(&d)
	return d
}

var identity = floodgate.Identity{Tenant: "acme", User: "alice", APIKey: "sk_live_supersecret", IP: netip.MustParseAddr("192.0.2.1")}

type step struct {
	name     string
	priority floodgate.Priority
	stages   floodgate.Chain
}

// runSteps runs each step's chain, observed, inside its own recorded span.
func runSteps(t *testing.T, h *harness, steps []step) {
	t.Helper()
	tracer := h.tp.Tracer("test")
	for _, s := range steps {
		ctx, span := tracer.Start(context.Background(), s.name)
		req := &floodgate.Request{Method: "/search.v1.Search/Query", Priority: s.priority, Identity: identity}
		_, done, _ := observeEach(s.stages, h.obs).Admit(ctx, req)
		if done != nil {
			done(floodgate.Result{})
		}
		span.End()
	}
}

// TestDecisionSequence runs a known sequence of allowed, limited, shed,
// concurrency-limited, fallback, cache and shadow decisions and checks the
// exact span attributes, span events and metric points they produce.
func TestDecisionSequence(t *testing.T) {
	h := newHarness(t)
	timeout := fmt.Errorf("fallback: store call: %w", context.DeadlineExceeded)
	refused := errors.New("redis: connection refused")
	steps := []step{
		{"allowed", floodgate.PriorityRead, floodgate.Chain{stage(shedAllow, nil), stage(concAllow, nil), stage(tiersAllow, nil)}},
		{"limited", floodgate.PriorityRead, floodgate.Chain{stage(shedAllow, nil), stage(concAllow, nil), stage(tiersDeny, nil)}},
		{"shed", floodgate.PriorityTest, floodgate.Chain{stage(shedDeny, nil), stage(concAllow, nil), stage(tiersAllow, nil)}},
		{"fallback", floodgate.PriorityRead, floodgate.Chain{stage(with(tiersAllow, func(d *floodgate.Decision) {
			d.Source = floodgate.SourceLocalFallback
			d.Remaining = 4
		}), timeout)}},
		{"fail_closed", floodgate.PriorityRead, floodgate.Chain{stage(with(tiersDeny, func(d *floodgate.Decision) {
			d.Source, d.Policy, d.Limit, d.RetryAfter = floodgate.SourceFailClosed, "login-ip", 5, time.Second
		}), refused)}},
		{"cache", floodgate.PriorityRead, floodgate.Chain{stage(with(tiersDeny, func(d *floodgate.Decision) {
			d.Source, d.RetryAfter = floodgate.SourceCache, 250*time.Millisecond
		}), nil)}},
		{"concurrency", floodgate.PriorityRead, floodgate.Chain{stage(shedAllow, nil), stage(concDeny, nil), stage(tiersAllow, nil)}},
		{"shadow", floodgate.PriorityRead, floodgate.Chain{stage(with(tiersAllow, func(d *floodgate.Decision) {
			d.Shadow, d.Remaining = true, 0
		}), nil)}},
	}
	runSteps(t, h, steps)

	keyHash := h.obs.KeyHash(identity)
	if len(keyHash) != 16 || strings.Contains(keyHash, "alice") {
		t.Fatalf("KeyHash = %q, want 16 hex digits", keyHash)
	}
	// span attributes: the last decision observed on each span.
	type ev map[string]string
	attrs := func(decision, stage, policy, source string, limit, remaining int64, retry float64, prio string, shadow, degraded bool) ev {
		return ev{
			"floodgate.decision":    "STRING:" + decision,
			"floodgate.stage":       "STRING:" + stage,
			"floodgate.policy":      "STRING:" + policy,
			"floodgate.source":      "STRING:" + source,
			"floodgate.limit":       fmt.Sprintf("INT64:%d", limit),
			"floodgate.remaining":   fmt.Sprintf("INT64:%d", remaining),
			"floodgate.retry_after": "FLOAT64:" + attribute.Float64Value(retry).String(),
			"floodgate.priority":    "STRING:" + prio,
			"floodgate.shadow":      fmt.Sprintf("BOOL:%t", shadow),
			"floodgate.degraded":    fmt.Sprintf("BOOL:%t", degraded),
			"floodgate.key_hash":    "STRING:" + keyHash,
		}
	}
	plus := func(e ev, k, v string) ev {
		out := ev{}
		for a, b := range e {
			out[a] = b
		}
		out[k] = v
		return out
	}
	shedA := attrs("allowed", "shedder", "", "shedder", 100, 60, 0, "read", false, false)
	concA := attrs("allowed", "concurrency", "concurrency", "concurrency", 20, 19, 0, "read", false, false)
	want := map[string]struct {
		span   ev
		events []ev
	}{
		"allowed": {
			span:   attrs("allowed", "tiers", "search", "store", 20, 19, 0, "read", false, false),
			events: []ev{shedA, concA, attrs("allowed", "tiers", "search", "store", 20, 19, 0, "read", false, false)},
		},
		"limited": {
			span:   attrs("limited", "tiers", "search", "store", 20, 0, 1.5, "read", false, false),
			events: []ev{shedA, concA, attrs("limited", "tiers", "search", "store", 20, 0, 1.5, "read", false, false)},
		},
		"shed": {
			span:   attrs("shed", "shedder", "shedder", "shedder", 100, 0, 2, "test", false, false),
			events: []ev{attrs("shed", "shedder", "shedder", "shedder", 100, 0, 2, "test", false, false)},
		},
		"fallback": {
			span: attrs("allowed", "tiers", "search", "local_fallback", 20, 4, 0, "read", false, true),
			events: []ev{plus(attrs("allowed", "tiers", "search", "local_fallback", 20, 4, 0, "read", false, true),
				"error.type", "STRING:timeout")},
		},
		"fail_closed": {
			span: attrs("limited", "tiers", "login-ip", "fail_closed", 5, 0, 1, "read", false, true),
			events: []ev{plus(attrs("limited", "tiers", "login-ip", "fail_closed", 5, 0, 1, "read", false, true),
				"error.type", "STRING:_OTHER")},
		},
		"cache": {
			span:   attrs("limited", "tiers", "search", "cache", 20, 0, 0.25, "read", false, false),
			events: []ev{attrs("limited", "tiers", "search", "cache", 20, 0, 0.25, "read", false, false)},
		},
		"concurrency": {
			span:   attrs("concurrency_limited", "concurrency", "concurrency", "concurrency", 20, 0, 0.25, "read", false, false),
			events: []ev{shedA, attrs("concurrency_limited", "concurrency", "concurrency", "concurrency", 20, 0, 0.25, "read", false, false)},
		},
		"shadow": {
			span:   attrs("allowed", "tiers", "search", "store", 20, 0, 0, "read", true, false),
			events: []ev{attrs("allowed", "tiers", "search", "store", 20, 0, 0, "read", true, false)},
		},
	}
	ended := h.rec.Ended()
	if len(ended) != len(steps) {
		t.Fatalf("%d spans ended, want %d", len(ended), len(steps))
	}
	for _, sp := range ended {
		w, ok := want[sp.Name()]
		if !ok {
			t.Fatalf("unexpected span %q", sp.Name())
		}
		equalAttrs(t, sp.Name()+" span", sp.Attributes(), w.span)
		if len(sp.Events()) != len(w.events) {
			t.Errorf("%s: %d events, want %d", sp.Name(), len(sp.Events()), len(w.events))
			continue
		}
		for i, e := range sp.Events() {
			if e.Name != fgotel.EventDecision {
				t.Errorf("%s: event %d named %q, want %q", sp.Name(), i, e.Name, fgotel.EventDecision)
			}
			equalAttrs(t, fmt.Sprintf("%s event %d", sp.Name(), i), e.Attributes, w.events[i])
		}
	}

	ms := h.collect(t)
	series := func(stage, decision, policy, source, prio string, shadow bool, n int) string {
		return enc(fgotel.AttrStage.String(stage), fgotel.AttrDecision.String(decision), fgotel.AttrPolicy.String(policy),
			fgotel.AttrSource.String(source), fgotel.AttrPriority.String(prio), fgotel.AttrShadow.Bool(shadow)) + fmt.Sprintf("=%d", n)
	}
	equalLines(t, "floodgate.decisions", intPoints[sum](t, ms["floodgate.decisions"]), []string{
		series("shedder", "allowed", "", "shedder", "read", false, 3),
		series("concurrency", "allowed", "concurrency", "concurrency", "read", false, 2),
		series("tiers", "allowed", "search", "store", "read", false, 1),
		series("tiers", "limited", "search", "store", "read", false, 1),
		series("shedder", "shed", "shedder", "shedder", "test", false, 1),
		series("tiers", "allowed", "search", "local_fallback", "read", false, 1),
		series("tiers", "limited", "login-ip", "fail_closed", "read", false, 1),
		series("tiers", "limited", "search", "cache", "read", false, 1),
		series("concurrency", "concurrency_limited", "concurrency", "concurrency", "read", false, 1),
		series("tiers", "allowed", "search", "store", "read", true, 1),
	})
	equalLines(t, "floodgate.cache.hits", intPoints[sum](t, ms["floodgate.cache.hits"]), []string{
		enc(fgotel.AttrPolicy.String("search")) + "=1",
	})
	d := ms["floodgate.decisions"]
	if d.Unit != "{decision}" || !d.Data.(metricdata.Sum[int64]).IsMonotonic {
		t.Errorf("floodgate.decisions: unit %q, monotonic %t; want {decision}, true", d.Unit, d.Data.(metricdata.Sum[int64]).IsMonotonic)
	}
	assertNoIdentity(t, ms)
}

// assertNoIdentity fails if any metric attribute carries an identity value.
func assertNoIdentity(t *testing.T, ms map[string]metricdata.Metrics) {
	t.Helper()
	for name, m := range ms {
		var sets []attribute.Set
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			for _, p := range d.DataPoints {
				sets = append(sets, p.Attributes)
			}
		case metricdata.Gauge[int64]:
			for _, p := range d.DataPoints {
				sets = append(sets, p.Attributes)
			}
		case metricdata.Histogram[float64]:
			for _, p := range d.DataPoints {
				sets = append(sets, p.Attributes)
			}
		}
		for _, s := range sets {
			e := s.Encoded(attribute.DefaultEncoder())
			for _, v := range []string{identity.Tenant, identity.User, identity.APIKey, identity.IP.String(), "user-"} {
				if strings.Contains(e, v) {
					t.Errorf("%s: attributes %q carry identity value %q", name, e, v)
				}
			}
		}
	}
}

// TestCardinality: 10 000 distinct users, API keys, tenants and IPs over
// three policies and two outcomes give exactly 6 decision series; and
// 10 000 distinct policy names under WithMaxPolicies(5) give exactly 5
// named series plus "_other".
func TestCardinality(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	policies := []string{"search", "tenant-plan", "ip-safety-net"}
	// Four goroutines share the 10 000 users, so the series caches are
	// also exercised concurrently (under -race).
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < 10_000; i += 4 {
				r := &floodgate.Request{Priority: floodgate.PriorityRead, Identity: floodgate.Identity{
					User: fmt.Sprintf("user-%d", i), APIKey: fmt.Sprintf("key-%d", i), Tenant: fmt.Sprintf("tenant-%d", i),
					IP: netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}),
				}}
				d := tiersAllow
				d.Policy = policies[i%3]
				d.Allowed = i%2 == 0
				h.obs.Observe(ctx, r, d, nil)
			}
		}()
	}
	wg.Wait()
	ms := h.collect(t)
	got := intPoints[sum](t, ms["floodgate.decisions"])
	// i%3 picks the policy and i%2 the outcome, so each (policy, outcome)
	// pair is one residue of i mod 6; 10 000 = 6*1666 + 4, so residues 0-3
	// occur 1667 times and 4-5 occur 1666 times.
	counts := map[string]map[string]int{
		"search":        {"allowed": 1667 /* 0 */, "limited": 1667 /* 3 */},
		"tenant-plan":   {"allowed": 1666 /* 4 */, "limited": 1667 /* 1 */},
		"ip-safety-net": {"allowed": 1667 /* 2 */, "limited": 1666 /* 5 */},
	}
	var want []string
	for _, p := range policies {
		for _, dec := range []string{"allowed", "limited"} {
			want = append(want, enc(fgotel.AttrStage.String("tiers"), fgotel.AttrDecision.String(dec), fgotel.AttrPolicy.String(p),
				fgotel.AttrSource.String("store"), fgotel.AttrPriority.String("read"), fgotel.AttrShadow.Bool(false))+fmt.Sprintf("=%d", counts[p][dec]))
		}
	}
	equalLines(t, "floodgate.decisions", got, want)
	if len(got) != 6 {
		t.Errorf("%d series, want 6", len(got))
	}
	assertNoIdentity(t, ms)

	// A policy source gone wrong: every request names a new policy.
	h2 := newHarness(t, fgotel.WithMaxPolicies(5))
	for i := range 10_000 {
		d := tiersDeny
		d.Policy = fmt.Sprintf("user-%d", i)
		h2.obs.Observe(ctx, &floodgate.Request{Priority: floodgate.PriorityRead}, d, nil)
	}
	got = intPoints[sum](t, h2.collect(t)["floodgate.decisions"])
	want = nil
	for i := range 5 {
		want = append(want, enc(fgotel.AttrStage.String("tiers"), fgotel.AttrDecision.String("limited"), fgotel.AttrPolicy.String(fmt.Sprintf("user-%d", i)),
			fgotel.AttrSource.String("store"), fgotel.AttrPriority.String("read"), fgotel.AttrShadow.Bool(false))+"=1")
	}
	want = append(want, enc(fgotel.AttrStage.String("tiers"), fgotel.AttrDecision.String("limited"), fgotel.AttrPolicy.String("_other"),
		fgotel.AttrSource.String("store"), fgotel.AttrPriority.String("read"), fgotel.AttrShadow.Bool(false))+"=9995")
	equalLines(t, "floodgate.decisions with 10 000 policies", got, want)
}

// TestStoreBreakerInFlight checks the hooks that decisions do not cover:
// store call durations (and their spans), breaker state, requests in flight.
func TestStoreBreakerInFlight(t *testing.T) {
	clk := clock.New(time.Time{})
	h := newHarness(t, fgotel.WithClock(clk))
	ctx := context.Background()

	h.obs.RecordStoreCall(ctx, 300*time.Microsecond, nil)
	h.obs.RecordStoreCall(ctx, 2*time.Millisecond, fmt.Errorf("take: %w", context.DeadlineExceeded))
	h.obs.RecordStoreCall(ctx, 40*time.Millisecond, errors.New("redis: connection refused"))
	h.obs.RecordStoreCall(ctx, 3*time.Millisecond, context.Canceled)
	parent, root := h.tp.Tracer("test").Start(ctx, "request")
	callCtx, end := h.obs.StartStoreCall(parent)
	if sc := trace.SpanFromContext(callCtx).SpanContext(); !sc.IsValid() || sc.SpanID() == root.SpanContext().SpanID() {
		t.Fatal("StartStoreCall did not return a context holding its own span")
	}
	clk.Advance(700 * time.Microsecond)
	end(nil)
	_, end = h.obs.StartStoreCall(parent)
	clk.Advance(5 * time.Millisecond)
	end(fmt.Errorf("take: %w", context.DeadlineExceeded))
	root.End()

	h.obs.BreakerStateChanged("redis", "closed", "open")
	h.obs.BreakerStateChanged("redis", "open", "half-open")
	h.obs.BreakerStateChanged("redis-eu", "closed", "open")
	var handled []error
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { handled = append(handled, err) }))
	h.obs.BreakerStateChanged("redis", "half-open", "sideways") // reported to otel.Handle, ignored
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Print(err) }))
	if len(handled) != 1 || !strings.Contains(handled[0].Error(), `unknown circuit breaker state "sideways"`) {
		t.Errorf("otel.Handle got %v, want one error naming the unknown state", handled)
	}

	chain := h.obs.TrackInFlight(floodgate.Chain{stage(shedAllow, nil), stage(tiersAllow, nil)})
	req := &floodgate.Request{Priority: floodgate.PriorityRead}
	_, done1, _ := chain.Admit(ctx, req)
	_, done2, _ := chain.Admit(ctx, req)
	_, done3, _ := chain.Admit(ctx, req)
	denied := h.obs.TrackInFlight(floodgate.Chain{stage(shedAllow, nil), stage(tiersDeny, nil)})
	if _, done, _ := denied.Admit(ctx, req); done != nil {
		t.Fatal("a denied chain returned a Done")
	}
	done1(floodgate.Result{})
	done2(floodgate.Result{})
	_ = done3 // still in flight
	h.obs.AddInFlight(ctx, floodgate.StageConcurrency, 2)

	ms := h.collect(t)

	// floodgate.store.duration: exact buckets, counts, sums, min and max.
	hist, ok := ms["floodgate.store.duration"].Data.(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("floodgate.store.duration: %T", ms["floodgate.store.duration"].Data)
	}
	if u := ms["floodgate.store.duration"].Unit; u != "s" {
		t.Errorf("floodgate.store.duration unit %q, want s", u)
	}
	bounds := []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}
	type hp struct {
		count   uint64
		sum     float64
		buckets []uint64
	}
	bucket := func(idx ...int) []uint64 {
		b := make([]uint64, len(bounds)+1)
		for _, i := range idx {
			b[i]++
		}
		return b
	}
	want := map[string]hp{
		enc(): {2, (300 * time.Microsecond).Seconds() + (700 * time.Microsecond).Seconds(), bucket(2, 3)},
		enc(fgotel.AttrErrorType.String("timeout")):  {2, (2 * time.Millisecond).Seconds() + (5 * time.Millisecond).Seconds(), bucket(4, 5)},
		enc(fgotel.AttrErrorType.String("_OTHER")):   {1, (40 * time.Millisecond).Seconds(), bucket(8)},
		enc(fgotel.AttrErrorType.String("canceled")): {1, (3 * time.Millisecond).Seconds(), bucket(5)},
	}
	if len(hist.DataPoints) != len(want) {
		t.Errorf("floodgate.store.duration: %d points, want %d", len(hist.DataPoints), len(want))
	}
	for _, p := range hist.DataPoints {
		k := p.Attributes.Encoded(attribute.DefaultEncoder())
		w, ok := want[k]
		if !ok {
			t.Errorf("unexpected store duration point %q", k)
			continue
		}
		if p.Count != w.count || p.Sum != w.sum || fmt.Sprint(p.BucketCounts) != fmt.Sprint(w.buckets) || fmt.Sprint(p.Bounds) != fmt.Sprint(bounds) {
			t.Errorf("store duration %q: count %d sum %v buckets %v bounds %v; want %d %v %v %v",
				k, p.Count, p.Sum, p.BucketCounts, p.Bounds, w.count, w.sum, w.buckets, bounds)
		}
	}

	// The store call spans: children of the request span, the failed one marked.
	var calls []sdktrace.ReadOnlySpan
	for _, s := range h.rec.Ended() {
		if s.Name() == "floodgate.store" {
			calls = append(calls, s)
			if s.Parent().SpanID() != root.SpanContext().SpanID() {
				t.Errorf("store span parent %s, want %s", s.Parent().SpanID(), root.SpanContext().SpanID())
			}
			if s.InstrumentationScope().Name != fgotel.ScopeName {
				t.Errorf("store span scope %q, want %q", s.InstrumentationScope().Name, fgotel.ScopeName)
			}
		}
	}
	if len(calls) != 2 {
		t.Fatalf("%d store spans, want 2", len(calls))
	}
	if calls[0].Status().Code.String() != "Unset" || calls[1].Status().Code.String() != "Error" || calls[1].Status().Description != "timeout" {
		t.Errorf("store span statuses %v, %v; want Unset, Error(timeout)", calls[0].Status(), calls[1].Status())
	}

	b := func(name, st string, v int) string {
		return enc(fgotel.AttrBreaker.String(name), fgotel.AttrBreakerState.String(st)) + fmt.Sprintf("=%d", v)
	}
	equalLines(t, "floodgate.fallback.breaker.state", intPoints[gauge](t, ms["floodgate.fallback.breaker.state"]), []string{
		b("redis", "closed", 0), b("redis", "half_open", 1), b("redis", "open", 0),
		b("redis-eu", "closed", 0), b("redis-eu", "half_open", 0), b("redis-eu", "open", 1),
	})
	tr := func(name, from, to string) string {
		return enc(fgotel.AttrBreaker.String(name), fgotel.AttrBreakerFrom.String(from), fgotel.AttrBreakerTo.String(to)) + "=1"
	}
	equalLines(t, "floodgate.fallback.breaker.transitions", intPoints[sum](t, ms["floodgate.fallback.breaker.transitions"]), []string{
		tr("redis", "closed", "open"), tr("redis", "open", "half_open"), tr("redis-eu", "closed", "open"),
	})

	inf := ms["floodgate.in_flight"]
	if s := inf.Data.(metricdata.Sum[int64]); s.IsMonotonic {
		t.Error("floodgate.in_flight is monotonic, want an up-down counter")
	}
	equalLines(t, "floodgate.in_flight", intPoints[sum](t, inf), []string{
		// shedder: 4 admitted (3 + the one tiers later denied, released by the chain), 3 finished.
		enc(fgotel.AttrStage.String("shedder")) + "=1",
		enc(fgotel.AttrStage.String("tiers")) + "=1",
		enc(fgotel.AttrStage.String("concurrency")) + "=2",
	})
}

// advancing is a real store whose Takes take a known time on the fake
// clock, so the measured durations are exact.
type advancing struct {
	quota.Store
	clk  *clock.Fake
	took time.Duration
}

func (a advancing) Take(ctx context.Context, b []quota.Bucket, r []quota.Result) (bool, error) {
	a.clk.Advance(a.took)
	return a.Store.Take(ctx, b, r)
}

// TestStoreWrapper: Observer.Store times every Take on the observer's
// clock, sets error.type on failures, and opens a child span only under a
// recording span.
func TestStoreWrapper(t *testing.T) {
	clk := clock.New(time.Unix(1_700_000_000, 0))
	h := newHarness(t, fgotel.WithClock(clk))
	mem, err := memstore.New(memstore.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	lim := quota.Limit{Rate: 10, Period: time.Second, Burst: 10}
	bucket := []quota.Bucket{{Key: "search:alice", Limit: lim, Cost: 1}}
	res := make([]quota.Result, 1)

	s := h.obs.Store(advancing{Store: mem, clk: clk, took: 700 * time.Microsecond})
	if ok, err := s.Take(context.Background(), bucket, res); !ok || err != nil {
		t.Fatalf("Take = %t, %v", ok, err)
	}
	ctx, root := h.tp.Tracer("test").Start(context.Background(), "request")
	s = h.obs.Store(advancing{Store: mem, clk: clk, took: 1200 * time.Microsecond})
	if ok, err := s.Take(ctx, bucket, res); !ok || err != nil {
		t.Fatalf("Take = %t, %v", ok, err)
	}
	root.End()
	// An empty key is a real error from the real store.
	if _, err := s.Take(context.Background(), []quota.Bucket{{Limit: lim, Cost: 1}}, res); err == nil {
		t.Fatal("Take with an empty key succeeded")
	}

	hist := h.collect(t)["floodgate.store.duration"].Data.(metricdata.Histogram[float64])
	got := map[string]string{}
	for _, p := range hist.DataPoints {
		got[p.Attributes.Encoded(attribute.DefaultEncoder())] = fmt.Sprintf("count=%d sum=%v", p.Count, p.Sum)
	}
	want := map[string]string{
		enc(): fmt.Sprintf("count=2 sum=%v", (700*time.Microsecond).Seconds()+(1200*time.Microsecond).Seconds()),
		enc(fgotel.AttrErrorType.String("_OTHER")): fmt.Sprintf("count=1 sum=%v", (1200 * time.Microsecond).Seconds()),
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("floodgate.store.duration = %v, want %v", got, want)
	}
	var store []sdktrace.ReadOnlySpan
	for _, sp := range h.rec.Ended() {
		if sp.Name() == "floodgate.store" {
			store = append(store, sp)
		}
	}
	if len(store) != 1 || store[0].Parent().SpanID() != root.SpanContext().SpanID() {
		t.Fatalf("%d floodgate.store spans, want 1 under the request span", len(store))
	}
}

// observeEach reports the decision of every stage of c to o, as
// interceptor.WithObserver does, without a transport.
func observeEach(c floodgate.Chain, o floodgate.Observer) floodgate.Chain {
	out := make(floodgate.Chain, len(c))
	for i, s := range c {
		out[i] = floodgate.AdmitFunc(func(ctx context.Context, r *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
			d, done, err := s.Admit(ctx, r)
			o.Observe(ctx, r, d, err)
			return d, done, err
		})
	}
	return out
}
