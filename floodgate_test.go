package floodgate_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/reqctx"
)

func TestParsePriority(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want floodgate.Priority
	}{
		{"critical", floodgate.PriorityCritical},
		{"write", floodgate.PriorityWrite},
		{"read", floodgate.PriorityRead},
		{"test", floodgate.PriorityTest},
		{" Critical ", floodgate.PriorityCritical},
		{"READ", floodgate.PriorityRead},
	} {
		got, err := floodgate.ParsePriority(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParsePriority(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if got.String() != tc.want.String() {
			t.Errorf("String round trip: %q", got.String())
		}
	}
	for _, bad := range []string{"", "unspecified", "crit", "high", "1"} {
		_, err := floodgate.ParsePriority(bad)
		if err == nil {
			t.Errorf("ParsePriority(%q) succeeded, want error", bad)
			continue
		}
		want := `floodgate: unknown priority "` + bad + `" (want critical, write, read or test)`
		if err.Error() != want {
			t.Errorf("ParsePriority(%q) error = %q, want %q", bad, err, want)
		}
	}
}

func TestPriorityOrderAndText(t *testing.T) {
	if !(floodgate.PriorityCritical > floodgate.PriorityWrite &&
		floodgate.PriorityWrite > floodgate.PriorityRead &&
		floodgate.PriorityRead > floodgate.PriorityTest &&
		floodgate.PriorityTest > floodgate.PriorityUnspecified) {
		t.Fatal("priorities are not ordered critical > write > read > test > unspecified")
	}
	var p floodgate.Priority
	if err := p.UnmarshalText([]byte("write")); err != nil || p != floodgate.PriorityWrite {
		t.Fatalf("UnmarshalText(write) = %v, %v", p, err)
	}
	if err := p.UnmarshalText([]byte("urgent")); err == nil {
		t.Fatal("UnmarshalText(urgent) succeeded")
	}
	if p != floodgate.PriorityWrite {
		t.Fatalf("failed UnmarshalText changed the value to %v", p)
	}
	if b, err := floodgate.PriorityRead.MarshalText(); err != nil || string(b) != "read" {
		t.Fatalf("MarshalText = %q, %v", b, err)
	}
	if _, err := floodgate.Priority(9).MarshalText(); err == nil {
		t.Fatal("MarshalText of an invalid priority succeeded")
	}
	if got := floodgate.Priority(9).String(); got != "priority(9)" {
		t.Fatalf("String of invalid = %q", got)
	}
}

// stage is a real, minimal Admitter that records what happens to it.
type stage struct {
	name     string
	allow    bool
	err      error
	policy   string
	noDone   bool
	log      *[]string
	released int
	results  []floodgate.Result
}

func (s *stage) Admit(_ context.Context, r *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
	*s.log = append(*s.log, "admit "+s.name)
	d := floodgate.Decision{Allowed: s.allow, Policy: s.policy, Stage: floodgate.Stage(s.name)}
	if !s.allow || s.noDone {
		return d, nil, s.err
	}
	return d, func(res floodgate.Result) {
		s.results = append(s.results, res)
		s.released++
		*s.log = append(*s.log, "done "+s.name)
	}, s.err
}

func TestChainStopsAtFirstDenyAndReleasesPassedStages(t *testing.T) {
	var log []string
	a := &stage{name: "a", allow: true, log: &log}
	b := &stage{name: "b", allow: true, log: &log}
	c := &stage{name: "c", allow: false, policy: "c-policy", log: &log}
	d := &stage{name: "d", allow: true, log: &log}
	dec, done, err := floodgate.Chain{a, b, c, d}.Admit(context.Background(), &floodgate.Request{})
	if err != nil {
		t.Fatalf("err = %v", err)
	}
	if dec.Allowed || dec.Policy != "c-policy" || dec.Stage != "c" {
		t.Fatalf("decision = %+v, want c's deny", dec)
	}
	if done != nil {
		t.Fatal("a denying chain returned a Done")
	}
	want := []string{"admit a", "admit b", "admit c", "done b", "done a"}
	if !reflect.DeepEqual(log, want) {
		t.Fatalf("log = %q, want %q", log, want)
	}
	if a.released != 1 || b.released != 1 || d.released != 0 {
		t.Fatalf("released a=%d b=%d d=%d", a.released, b.released, d.released)
	}
	for _, s := range []*stage{a, b} {
		if s.results[0] != floodgate.Ignored {
			t.Fatalf("stage %s released with %+v, want floodgate.Ignored", s.name, s.results[0])
		}
	}
}

func TestChainAllowReturnsLastPolicyAndReleasesInReverse(t *testing.T) {
	var log []string
	a := &stage{name: "a", allow: true, policy: "shed", log: &log}
	b := &stage{name: "b", allow: true, log: &log, noDone: true}
	c := &stage{name: "c", allow: true, policy: "tenant-plan", log: &log}
	e := &stage{name: "e", allow: true, log: &log}
	dec, done, err := floodgate.Chain{a, b, c, e}.Admit(context.Background(), &floodgate.Request{})
	if err != nil || !dec.Allowed {
		t.Fatalf("decision = %+v, err = %v", dec, err)
	}
	if dec.Policy != "tenant-plan" {
		t.Fatalf("binding policy = %q, want the last stage that named one", dec.Policy)
	}
	if done == nil {
		t.Fatal("allowing chain returned nil Done")
	}
	done(floodgate.Result{})
	want := []string{"admit a", "admit b", "admit c", "admit e", "done e", "done c", "done a"}
	if !reflect.DeepEqual(log, want) {
		t.Fatalf("log = %q, want %q", log, want)
	}
}

func TestChainJoinsErrorsButDecisionRules(t *testing.T) {
	var log []string
	e1 := errors.New("store down")
	e2 := errors.New("redis slow")
	a := &stage{name: "a", allow: true, err: e1, log: &log}
	b := &stage{name: "b", allow: true, err: e2, log: &log}
	dec, done, err := floodgate.Chain{a, b}.Admit(context.Background(), &floodgate.Request{})
	if !dec.Allowed {
		t.Fatal("an error without a deny stopped the chain")
	}
	if !errors.Is(err, e1) || !errors.Is(err, e2) {
		t.Fatalf("err = %v, want both stage errors", err)
	}
	done(floodgate.Result{})
	if a.released != 1 || b.released != 1 {
		t.Fatal("stages not released")
	}
}

func TestChainEdgeLengths(t *testing.T) {
	d, done, err := floodgate.Chain{}.Admit(context.Background(), &floodgate.Request{})
	if !d.Allowed || done != nil || err != nil {
		t.Fatalf("empty chain = %+v %v %v", d, done != nil, err)
	}
	var log []string
	one := &stage{name: "one", allow: true, log: &log}
	d, done, _ = floodgate.Chain{one}.Admit(context.Background(), &floodgate.Request{})
	if !d.Allowed || done == nil {
		t.Fatal("single-stage chain did not pass the stage through")
	}
	done(floodgate.Result{})
	if one.released != 1 {
		t.Fatal("single stage not released")
	}
}

func TestRequestContext(t *testing.T) {
	if _, ok := floodgate.FromContext(context.Background()); ok {
		t.Fatal("empty context has a request")
	}
	type key struct{}
	parent := context.WithValue(context.Background(), key{}, "v")
	origin := new(int)
	ctx, r := reqctx.New[floodgate.Request](parent, origin)
	r.Method = "/a.B/C"
	got, ok := floodgate.FromContext(ctx)
	if !ok || got != r || got.Method != "/a.B/C" {
		t.Fatal("request not found in its context")
	}
	if reqctx.Origin(ctx) != origin {
		t.Fatal("Origin does not report the origin the request was built with")
	}
	if reqctx.Origin(parent) != nil {
		t.Fatal("a context without a request has an origin")
	}
	if ctx.Value(key{}) != "v" {
		t.Fatal("the request context hides its parent's values")
	}
}

func TestSourceDegraded(t *testing.T) {
	for s, want := range map[floodgate.Source]bool{
		floodgate.SourceStore: false, floodgate.SourceCache: false, floodgate.SourceShedder: false,
		floodgate.SourceConcurrency: false, floodgate.SourceLocalFallback: true,
		floodgate.SourceFailOpen: true, floodgate.SourceFailClosed: true,
	} {
		if got := s.Degraded(); got != want {
			t.Errorf("%s.Degraded() = %v, want %v", s, got, want)
		}
	}
}

func BenchmarkChainAllow3(b *testing.B) {
	noop := func(floodgate.Result) {}
	mk := func(policy string) floodgate.Admitter {
		return floodgate.AdmitFunc(func(context.Context, *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
			return floodgate.Decision{Allowed: true, Policy: policy}, noop, nil
		})
	}
	c := floodgate.Chain{mk("shed"), mk("conc"), mk("tiers")}
	r := &floodgate.Request{Method: "/a.B/C"}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_, done, _ := c.Admit(ctx, r)
		done(floodgate.Result{})
	}
}

func TestChainReleasesEveryStageForAnyLength(t *testing.T) {
	for n := 2; n <= 7; n++ {
		var log []string
		chain := make(floodgate.Chain, n)
		var want []string
		for i := range n {
			chain[i] = &stage{name: string(rune('a' + i)), allow: true, log: &log}
			want = append(want, "admit "+string(rune('a'+i)))
		}
		for i := n - 1; i >= 0; i-- {
			want = append(want, "done "+string(rune('a'+i)))
		}
		_, done, _ := chain.Admit(context.Background(), &floodgate.Request{})
		res := floodgate.Result{Outcome: floodgate.OutcomeDropped, Cost: int64(n), HasCost: true}
		done(res)
		if !reflect.DeepEqual(log, want) {
			t.Fatalf("n=%d: log = %q, want %q", n, log, want)
		}
		for _, a := range chain {
			if got := a.(*stage).results; len(got) != 1 || got[0] != res {
				t.Fatalf("n=%d: stage %s got %+v, want [%+v]", n, a.(*stage).name, got, res)
			}
		}
	}
}

// TestRequestContextNode: the context a transport starts a call with
// (reqctx.New) carries the Request, its parent's values and cancellation,
// in one allocation.
func TestRequestContextNode(t *testing.T) {
	type otherKey struct{}
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), otherKey{}, "v"))
	ctx, r := reqctx.New[floodgate.Request](parent, nil)
	r.Method = "/a.B/C"
	got, ok := floodgate.FromContext(ctx)
	if !ok || got != r || got.Method != "/a.B/C" {
		t.Fatalf("FromContext = %v, %v; want the request", got, ok)
	}
	if ctx.Value(otherKey{}) != "v" {
		t.Fatal("parent values are not visible")
	}
	child, stop := context.WithCancel(ctx)
	defer stop()
	cancel()
	<-child.Done() // cancellation flows through the request context
	if ctx.Err() != context.Canceled {
		t.Fatalf("Err = %v", ctx.Err())
	}
	if n := testing.AllocsPerRun(100, func() { sinkCtx, _ = reqctx.New[floodgate.Request](context.Background(), nil) }); n != 1 {
		t.Fatalf("reqctx.New allocates %v times, want 1", n)
	}
}

var sinkCtx context.Context

func TestReportCost(t *testing.T) {
	if err := floodgate.ReportCost(context.Background(), 3); err == nil {
		t.Fatal("ReportCost without a floodgate request succeeded")
	}
	if _, ok := reqctx.Cost(context.Background()); ok {
		t.Fatal("reqctx.Cost without a floodgate request reported one")
	}
	ctx, _ := reqctx.New[floodgate.Request](context.Background(), nil)
	if n, ok := reqctx.Cost(ctx); ok || n != 0 {
		t.Fatalf("reqctx.Cost before any report = %d, %v; want 0, false", n, ok)
	}
	if err := floodgate.ReportCost(ctx, -1); err == nil {
		t.Fatal("ReportCost(-1) succeeded")
	}
	// A derived context reports into the same request.
	type k struct{}
	child := context.WithValue(ctx, k{}, 1)
	for _, n := range []int64{0, 5, 2} {
		if err := floodgate.ReportCost(child, n); err != nil {
			t.Fatal(err)
		}
		if got, ok := reqctx.Cost(ctx); !ok || got != n {
			t.Fatalf("reqctx.Cost = %d, %v; want %d, true (the last report)", got, ok, n)
		}
	}
}

func TestOutcomeString(t *testing.T) {
	for o, want := range map[floodgate.Outcome]string{
		floodgate.OutcomeSuccess: "success", floodgate.OutcomeFailed: "failed",
		floodgate.OutcomeDropped: "dropped", floodgate.OutcomeIgnored: "ignored", 9: "outcome(9)",
	} {
		if got := o.String(); got != want {
			t.Errorf("Outcome(%d).String() = %q, want %q", o, got, want)
		}
	}
}

// TestReportMeter: named meters are recorded beside the default one, each
// replaced by a later report, through derived contexts; bad names and
// values are refused naming what is wrong, and record nothing; the name ""
// is the default meter (ReportCost).
func TestReportMeter(t *testing.T) {
	if err := floodgate.ReportMeter(context.Background(), "output_tokens", 3); err == nil || !strings.Contains(err.Error(), "no floodgate request") {
		t.Fatalf("ReportMeter without a floodgate request = %v, want an error saying so", err)
	}
	ctx, _ := reqctx.New[floodgate.Request](context.Background(), nil)
	if _, _, m := reqctx.Costs(ctx); m != nil {
		t.Fatal("a request that reported no meter has Meters")
	}
	for _, c := range []struct {
		name string
		n    int64
		want string
	}{
		{"output tokens", 1, `floodgate: ReportMeter: meter "output tokens" is not a meter name: use one or more of [A-Za-z0-9_.-], such as output_tokens`},
		{"tokens\n", 1, `floodgate: ReportMeter: meter "tokens\n" is not a meter name: use one or more of [A-Za-z0-9_.-], such as output_tokens`},
		{strings.Repeat("x", 65), 1, `floodgate: ReportMeter: meter "xxxxxxxxxxxxxxxxxxxx"... is longer than 64 bytes`},
		{"output_tokens", -1, `floodgate: ReportMeter: meter "output_tokens": negative value -1`},
		{"", -2, `floodgate: ReportCost: negative cost -2`},
	} {
		if err := floodgate.ReportMeter(ctx, c.name, c.n); err == nil || err.Error() != c.want {
			t.Errorf("ReportMeter(%q, %d) = %v, want %s", c.name, c.n, err, c.want)
		}
	}
	if _, ok, m := reqctx.Costs(ctx); ok || m != nil {
		t.Fatal("a refused report recorded something")
	}
	type k struct{}
	child := context.WithValue(ctx, k{}, 1)
	for _, r := range []struct {
		meter string
		n     int64
	}{{"input_tokens", 120}, {"output_tokens", 7}, {"input_tokens", 130}, {"", 4}, {"a.b-C_9", 0}} {
		if err := floodgate.ReportMeter(child, r.meter, r.n); err != nil {
			t.Fatal(err)
		}
	}
	cost, has, m := reqctx.Costs(ctx)
	if !has || cost != 4 {
		t.Fatalf("default meter = %d, %v; want 4, true (ReportMeter with \"\")", cost, has)
	}
	for name, want := range map[string]int64{"input_tokens": 130, "output_tokens": 7, "a.b-C_9": 0} {
		if got, ok := m.Meter(name); !ok || got != want {
			t.Errorf("Meter(%q) = %d, %v; want %d, true (the last report)", name, got, ok, want)
		}
	}
	if got, ok := m.Meter("bytes"); ok {
		t.Errorf("Meter(bytes) = %d, true; want nothing reported", got)
	}
	if got, ok := m.Meter(""); ok {
		t.Errorf("Meter(\"\") = %d, true; the default meter is Cost, not a named one", got)
	}
}

// TestReportCostAllocatesNothing: the default meter's report and its
// reading allocate nothing; a request's first named meter allocates once,
// later reports of it none.
func TestReportCostAllocatesNothing(t *testing.T) {
	ctx, _ := reqctx.New[floodgate.Request](context.Background(), nil)
	if n := testing.AllocsPerRun(100, func() {
		_ = floodgate.ReportCost(ctx, 5)
		_, _, _ = reqctx.Costs(ctx)
	}); n != 0 {
		t.Fatalf("ReportCost and reading it allocate %v times, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() {
		c, _ := reqctx.New[floodgate.Request](context.Background(), nil)
		_ = floodgate.ReportMeter(c, "output_tokens", 5)
		_ = floodgate.ReportMeter(c, "output_tokens", 6)
		_ = floodgate.ReportMeter(c, "input_tokens", 6)
	}); n != 2 {
		t.Fatalf("a request with two named meters allocates %v times, want 2 (its context node and its Meters)", n)
	}
}
