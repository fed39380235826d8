package otel

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/floodgate-go/floodgate"
)

func TestNewRejectsBadOptions(t *testing.T) {
	cases := []struct {
		name string
		opt  Option
		want string
	}{
		{"nil tracer provider", WithTracerProvider(nil), "otel: WithTracerProvider: provider is nil"},
		{"nil meter provider", WithMeterProvider(nil), "otel: WithMeterProvider: provider is nil"},
		{"zero policies", WithMaxPolicies(0), "otel: WithMaxPolicies: 0 is out of range [1, 10000]"},
		{"too many policies", WithMaxPolicies(10001), "otel: WithMaxPolicies: 10001 is out of range [1, 10000]"},
		{"short secret", WithKeyHashSecret([]byte("short")), "otel: WithKeyHashSecret: secret is 5 bytes, want at least 16"},
		{"nil clock", WithClock(nil), "otel: WithClock: clock is nil"},
		{"nil option", nil, "otel: nil Option"},
	}
	var all []Option
	var want []string
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o, err := New(c.opt)
			if err == nil || o != nil {
				t.Fatalf("New = %v, %v; want an error", o, err)
			}
			if err.Error() != c.want {
				t.Errorf("error %q, want %q", err, c.want)
			}
		})
		all = append(all, WithClock(floodgate.SystemClock()), c.opt)
		want = append(want, c.want)
	}
	// Every bad option is named, one line each, good ones in between.
	if _, err := New(all...); err == nil || err.Error() != strings.Join(want, "\n") {
		t.Errorf("New(every bad option) = %v, want:\n%s", err, strings.Join(want, "\n"))
	}
}

// nilMeter is a meter whose instruments fail without returning one.
type nilMeter struct{ metricnoop.Meter }

func (nilMeter) Int64Counter(string, ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	return nil, errors.New("no counter")
}

type nilMeterProvider struct{ metricnoop.MeterProvider }

func (nilMeterProvider) Meter(string, ...metric.MeterOption) metric.Meter { return nilMeter{} }

// TestNewSurvivesFailingInstruments: an instrument the provider fails to
// create is reported to otel.Handle and replaced by a no-op one; New
// succeeds and the observer works.
func TestNewSurvivesFailingInstruments(t *testing.T) {
	var mu sync.Mutex
	var handled []string
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		mu.Lock()
		handled = append(handled, err.Error())
		mu.Unlock()
	}))
	t.Cleanup(func() { otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Print(err) })) })
	o, err := New(WithMeterProvider(nilMeterProvider{}))
	if err != nil {
		t.Fatal(err)
	}
	o.Observe(context.Background(), nil, floodgate.Decision{Stage: floodgate.StageTiers, Source: floodgate.SourceCache}, nil)
	o.Observe(context.Background(), nil, floodgate.Decision{Allowed: true, Stage: floodgate.StageTiers, SoftExceeded: "plan"}, nil)
	o.BreakerStateChanged("redis", "closed", "open")
	mu.Lock()
	defer mu.Unlock()
	if len(handled) != 4 || handled[0] != "floodgate/otel: no counter" {
		t.Errorf("otel.Handle got %q, want the error of each of the 4 counters", handled)
	}
}

func TestKeyHash(t *testing.T) {
	secret := []byte("0123456789abcdef0123")
	a, err := New(WithKeyHashSecret(secret))
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(WithKeyHashSecret(secret))
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(WithKeyHashSecret([]byte("another secret, 16+ bytes")))
	if err != nil {
		t.Fatal(err)
	}
	ip := netip.MustParseAddr("192.0.2.7")
	full := floodgate.Identity{Tenant: "acme", User: "alice", APIKey: "sk_live_x", IP: ip}
	h := a.KeyHash(full)
	if len(h) != 16 || strings.Trim(h, "0123456789abcdef") != "" {
		t.Fatalf("KeyHash = %q, want 16 lower-case hex digits", h)
	}
	if b.KeyHash(full) != h {
		t.Error("observers sharing a secret disagree")
	}
	if c.KeyHash(full) == h {
		t.Error("observers with different secrets agree")
	}
	// The principal is the API key: the other fields do not change it.
	if a.KeyHash(floodgate.Identity{APIKey: "sk_live_x"}) != h {
		t.Error("hash of the API key alone differs from the full identity's")
	}
	// The same text as a different kind of principal hashes differently.
	seen := map[string]string{}
	for name, id := range map[string]floodgate.Identity{
		"key": {APIKey: "x"}, "user": {User: "x"}, "tenant": {Tenant: "x"}, "ip": {IP: ip}, "ip-as-user": {User: ip.String()},
	} {
		got := a.KeyHash(id)
		if other, dup := seen[got]; dup {
			t.Errorf("%s and %s hash alike: %s", name, other, got)
		}
		seen[got] = name
	}
	if got := a.KeyHash(floodgate.Identity{}); got != "" {
		t.Errorf("anonymous identity hashed to %q, want empty", got)
	}
	// Default secret: drawn once per process, so observers agree.
	d1, _ := New()
	d2, _ := New()
	if d1.KeyHash(full) != d2.KeyHash(full) || d1.KeyHash(full) == h {
		t.Error("default-secret observers should agree with each other and differ from a configured secret")
	}
}

func TestInternerCap(t *testing.T) {
	in := newInterner(3, "")
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				in.lookup(fmt.Sprintf("p%d", (i+g)%10))
			}
		}()
	}
	wg.Wait()
	if n := len(*in.idx.Load()); n != 4 { // "" plus 3
		t.Fatalf("%d values admitted, want 4", n)
	}
	if in.lookup("") != 1 || in.name(1) != "" {
		t.Error("seed value not at index 1")
	}
	if i := in.lookup("never-seen"); i != 0 || in.name(i) != otherValue {
		t.Errorf("value beyond the cap got index %d (%q), want 0 (%q)", i, in.name(i), otherValue)
	}
	for i := uint16(1); i < 4; i++ {
		if n := in.name(i); in.lookup(n) != i {
			t.Errorf("name(%d) = %q does not look up to %d", i, n, i)
		}
	}
}

// TestObserveNoopDoesNotAllocate: with no-op providers and a span that is
// not recording, a decision costs no allocation once its series is cached.
func TestObserveNoopDoesNotAllocate(t *testing.T) {
	o := newNoop(t)
	ctx := context.Background()
	r := &floodgate.Request{Method: "/x.v1.X/Y", Priority: floodgate.PriorityRead, Identity: floodgate.Identity{User: "u"}}
	d := floodgate.Decision{Allowed: true, Stage: floodgate.StageTiers, Source: floodgate.SourceCache, Policy: "search", Limit: 10, Remaining: 3}
	o.Observe(ctx, r, d, nil)
	o.AddInFlight(ctx, floodgate.StageTiers, 1)
	if n := testing.AllocsPerRun(1000, func() {
		o.Observe(ctx, r, d, nil)
		o.AddInFlight(ctx, floodgate.StageTiers, 1)
		o.RecordStoreCall(ctx, 1000, nil)
	}); n != 0 {
		t.Errorf("%v allocations per decision, want 0", n)
	}
	if got := o.series.len(); got != 1 {
		t.Errorf("%d series cached, want 1", got)
	}
}

// TestGlobalProviders: New with no options uses the global providers (no-op
// until an SDK is installed) and observes without error.
func TestGlobalProviders(t *testing.T) {
	o, err := New()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	o.Observe(ctx, nil, floodgate.Decision{}, nil)
	o.Observe(ctx, &floodgate.Request{Priority: floodgate.Priority(200)}, floodgate.Decision{Stage: floodgate.StageShedder}, context.Canceled)
	o.BreakerStateChanged("redis", "closed", "open")
	o.RecordStoreCall(ctx, 5, context.DeadlineExceeded)
	ctx2, end := o.StartStoreCall(ctx)
	end(nil)
	if ctx2 == nil {
		t.Fatal("StartStoreCall returned a nil context")
	}
	a := o.TrackInFlight(floodgate.Chain{floodgate.AdmitFunc(func(context.Context, *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
		return floodgate.Decision{Allowed: true, Stage: floodgate.StageTiers}, nil, nil
	})})
	_, done, _ := a.Admit(ctx, &floodgate.Request{})
	if done == nil {
		t.Fatal("TrackInFlight returned no Done for an admitted request")
	}
	done(floodgate.Result{})
}

// newNoop returns an Observer on no-op providers.
func newNoop(tb testing.TB) *Observer {
	tb.Helper()
	o, err := New(WithTracerProvider(tracenoop.NewTracerProvider()), WithMeterProvider(metricnoop.NewMeterProvider()))
	if err != nil {
		tb.Fatal(err)
	}
	return o
}

func BenchmarkObserveNoop(b *testing.B) {
	o := newNoop(b)
	ctx := context.Background()
	r := &floodgate.Request{Method: "/x.v1.X/Y", Priority: floodgate.PriorityRead, Identity: floodgate.Identity{User: "u"}}
	d := floodgate.Decision{Allowed: true, Stage: floodgate.StageTiers, Source: floodgate.SourceStore, Policy: "search", Limit: 10, Remaining: 3}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			o.Observe(ctx, r, d, nil)
		}
	})
}

func BenchmarkKeyHash(b *testing.B) {
	o, err := New(WithKeyHashSecret([]byte("0123456789abcdef")))
	if err != nil {
		b.Fatal(err)
	}
	id := floodgate.Identity{APIKey: "sk_live_0123456789abcdef", User: "alice"}
	b.ReportAllocs()
	for b.Loop() {
		_ = o.KeyHash(id)
	}
}

// methodsStage offers per-method options, as a *tiers.Limiter does.
type methodsStage struct{}

func (methodsStage) Admit(context.Context, *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
	return floodgate.Decision{Allowed: true}, nil, nil
}

func (methodsStage) MethodOptions(string) (floodgate.MethodOptions, bool) {
	return floodgate.MethodOptions{Cost: 3}, true
}

// TestTrackInFlightUnwraps: TrackInFlight's wrapper follows floodgate's
// unwrap convention, alone and around each stage of a Chain.
func TestTrackInFlightUnwraps(t *testing.T) {
	o := newNoop(t)
	type methods interface {
		MethodOptions(string) (floodgate.MethodOptions, bool)
	}
	for _, a := range []floodgate.Admitter{o.TrackInFlight(methodsStage{}), o.TrackInFlight(floodgate.Chain{methodsStage{}})} {
		if _, ok := a.(methods); ok {
			t.Fatal("the wrapper offers MethodOptions itself")
		}
		if _, ok := floodgate.As[methods](a); !ok {
			t.Errorf("%T: the wrapped stage's MethodOptions not found", a)
		}
	}
}
