package storetest_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/fallback"
	fgotel "github.com/floodgate-go/floodgate/otel"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/localfirst"
	"github.com/floodgate-go/floodgate/tiers/memstore"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// The policies a stack is asked to honour, one capability each.
const (
	settleRule = `
rules:
  - {name: tokens, key: [user], rate: 1000/1h, burst: 1000, cost: 100, settle: true}
`
	waitRule = `
rules:
  - {name: shaped, key: [user], rate: 1/30s, burst: 1, max_wait: 1m}
`
	localRules = `
rules:
  - {name: leased, match: {method: /leased}, key: [user], rate: 1000/1s, burst: 1000, consistency: leased}
  - {name: async, match: {method: /async}, key: [user], rate: 1000/1s, burst: 1000, consistency: async}
`
)

// stack is one composition of stores, as a service wires it.
type stack struct {
	name string
	// build returns the store handed to tiers.NewLimiter.
	build func(t *testing.T, e *env) quota.Store
	// local: a tiers/localfirst layer decides leased and async rules.
	local bool
	// decides: a layer answers every Take when its backend fails
	// (fallback, memstore), so on_store_error local is honoured.
	decides bool
}

// env holds what the stacks are built from: one observer, and a Redis
// server shared by the Redis stacks (each with its own key prefix).
type env struct {
	obs *fgotel.Observer
	srv *redistest.Server
}

func (e *env) mem(t *testing.T) *memstore.Store {
	t.Helper()
	s, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (e *env) redis(t *testing.T) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(e.srv.Client(), redisstore.WithPrefix(strings.ReplaceAll(t.Name(), "/", ":")+":"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// guard wraps s in a fallback store whose timeout is long enough that a
// busy machine's Redis calls are decided by Redis, not locally.
func (e *env) guard(t *testing.T, s quota.Store) quota.Store {
	t.Helper()
	f, err := fallback.New(s, fallback.WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// ledger is the otel-wrapped store as a local-first ledger: the wrapper
// must forward report calls.
func (e *env) ledger(t *testing.T, s quota.Store) quota.Reporter {
	t.Helper()
	l, ok := e.obs.Store(s).(quota.Reporter)
	if !ok {
		t.Fatalf("the otel store wrapper over %T is not a quota.Reporter: it drops Report and Resolve", s)
	}
	return l
}

func (e *env) localFirst(t *testing.T, exact quota.Store, ledger quota.Reporter) quota.Store {
	t.Helper()
	lf, err := localfirst.New(exact, ledger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lf.Close(context.Background()) })
	return lf
}

var stacks = []stack{
	{name: "memstore", decides: true, build: func(t *testing.T, e *env) quota.Store { return e.mem(t) }},
	{name: "otel/memstore", decides: true, build: func(t *testing.T, e *env) quota.Store { return e.obs.Store(e.mem(t)) }},
	{name: "localfirst/otel/memstore", local: true, decides: true, build: func(t *testing.T, e *env) quota.Store {
		m := e.mem(t)
		return e.localFirst(t, e.obs.Store(m), e.ledger(t, m))
	}},
	{name: "otel/localfirst/memstore", local: true, decides: true, build: func(t *testing.T, e *env) quota.Store {
		m := e.mem(t)
		return e.obs.Store(e.localFirst(t, m, m))
	}},
	{name: "redisstore", build: func(t *testing.T, e *env) quota.Store { return e.redis(t) }},
	{name: "otel/redisstore", build: func(t *testing.T, e *env) quota.Store { return e.obs.Store(e.redis(t)) }},
	{name: "fallback/redisstore", decides: true, build: func(t *testing.T, e *env) quota.Store { return e.guard(t, e.redis(t)) }},
	{name: "fallback/otel/redisstore", decides: true, build: func(t *testing.T, e *env) quota.Store {
		return e.guard(t, e.obs.Store(e.redis(t)))
	}},
	{name: "otel/fallback/redisstore", decides: true, build: func(t *testing.T, e *env) quota.Store {
		return e.obs.Store(e.guard(t, e.redis(t)))
	}},
	{name: "localfirst/fallback/otel/redisstore", local: true, decides: true, build: func(t *testing.T, e *env) quota.Store {
		r := e.redis(t)
		return e.localFirst(t, e.guard(t, e.obs.Store(r)), r)
	}},
	{name: "localfirst/fallback/redisstore,ledger=otel", local: true, decides: true, build: func(t *testing.T, e *env) quota.Store {
		r := e.redis(t)
		return e.localFirst(t, e.guard(t, r), e.ledger(t, r))
	}},
	{name: "otel/fallback/localfirst/redisstore", local: true, decides: true, build: func(t *testing.T, e *env) quota.Store {
		r := e.redis(t)
		return e.obs.Store(e.guard(t, e.localFirst(t, r, r)))
	}},
	{name: "otel/localfirst/redisstore", local: true, build: func(t *testing.T, e *env) quota.Store {
		r := e.redis(t)
		return e.obs.Store(e.localFirst(t, r, r))
	}},
	{name: "otel/localfirst/otel/fallback/otel/redisstore", local: true, decides: true, build: func(t *testing.T, e *env) quota.Store {
		r := e.redis(t)
		return e.obs.Store(e.localFirst(t, e.obs.Store(e.guard(t, e.obs.Store(r))), e.ledger(t, r)))
	}},
}

// logCapture collects what the default slog logger writes while a test
// runs (the Limiter's start-up warnings).
type logCapture struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (c *logCapture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.Write(p)
}

func (c *logCapture) take() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.buf.String()
	c.buf.Reset()
	return s
}

func limiter(t *testing.T, store quota.Store, policy string, opts ...tiers.Option) (*tiers.Limiter, error) {
	t.Helper()
	p, err := tiers.Load([]byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	return tiers.NewLimiter(store, p, opts...)
}

func admit(t *testing.T, l *tiers.Limiter, method, user string) (floodgate.Decision, floodgate.Done) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d, done, err := l.Admit(ctx, &floodgate.Request{Method: method, Identity: floodgate.Identity{User: user}})
	if err != nil {
		t.Fatalf("Admit: %v", err)
	}
	return d, done
}

// TestWrapperStacks runs every store wrapper of the module, and the stacks
// of them that the README and the examples wire, against every capability
// a policy can ask of its store: a rule that settles, a rule that waits
// (max_wait), leased and async rules decided by a local-first layer (or
// refused at construction where there is none), reports through the
// local-first ledger, and on_store_error local (a warning at construction
// unless a layer decides store errors). No wrapper may hide what the store
// beneath it can do.
func TestWrapperStacks(t *testing.T) {
	logs := &logCapture{}
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})))
	t.Cleanup(func() { slog.SetDefault(prev) })

	obs, err := fgotel.New()
	if err != nil {
		t.Fatal(err)
	}
	e := &env{obs: obs, srv: redistest.Start(t)}
	for _, st := range stacks {
		t.Run(st.name, func(t *testing.T) {
			store := st.build(t, e)

			t.Run("settle", func(t *testing.T) {
				logs.take()
				l, err := limiter(t, store, settleRule)
				if err != nil {
					t.Fatalf("NewLimiter refused a settle rule: %v", err)
				}
				warned := strings.Contains(logs.take(), "has no local fallback")
				if warned == st.decides {
					t.Errorf("on_store_error local: warned %v, want %v (DecidesOnStoreError through the stack)", warned, !st.decides)
				}
				d, done := admit(t, l, "/settle", "u")
				if !d.Allowed || done == nil {
					t.Fatalf("allowed %v, Done %v; want an allowed request with a Done", d.Allowed, done != nil)
				}
				done(floodgate.Result{Cost: 10, HasCost: true})
				// Settled to 10, the estimate's 100 less 90: a second
				// request of 100 leaves 10 fewer units than the first did.
				if d2, _ := admit(t, l, "/settle", "u"); !d2.Allowed || d2.Remaining != d.Remaining-10 {
					t.Fatalf("after settling: allowed %v, remaining %d; want allowed with %d (the 90 given back)", d2.Allowed, d2.Remaining, d.Remaining-10)
				}
			})

			// The second request books the unit that comes back 30 s after
			// the first (the store's time, real) and waits for it on the
			// limiter's fake clock, which the test moves once the request
			// waits: no real wait, and no busy machine's delay between the
			// two requests near the 30 s that would refill the bucket.
			t.Run("max_wait", func(t *testing.T) {
				clk := clock.New(time.Now())
				l, err := limiter(t, store, waitRule, tiers.WithClock(clk))
				if err != nil {
					t.Fatalf("NewLimiter refused a max_wait rule: %v", err)
				}
				if d, _ := admit(t, l, "/wait", "u"); !d.Allowed {
					t.Fatalf("first request denied: %+v", d)
				}
				type admitted struct {
					d   floodgate.Decision
					err error
				}
				second := make(chan admitted, 1)
				go func() {
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
					defer cancel()
					d, _, err := l.Admit(ctx, &floodgate.Request{Method: "/wait", Identity: floodgate.Identity{User: "u"}})
					second <- admitted{d, err}
				}()
				var a admitted
				for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
					if clk.Timers() > 0 {
						clk.Advance(time.Minute)
					}
					select {
					case a = <-second:
					default:
						if time.Now().After(deadline) {
							t.Fatal("the second request neither waited nor returned within 10s")
						}
						continue
					}
					break
				}
				if a.err != nil || !a.d.Allowed || a.d.Waited <= 0 {
					t.Fatalf("second request: allowed %v after waiting %s (%v), want allowed after a wait (burst 1, 1/30s)", a.d.Allowed, a.d.Waited, a.err)
				}
			})

			t.Run("leased+async", func(t *testing.T) {
				l, err := limiter(t, store, localRules)
				if !st.local {
					if err == nil || !strings.Contains(err.Error(), `"leased"`) || !strings.Contains(err.Error(), `"async"`) ||
						!strings.Contains(err.Error(), "localfirst") {
						t.Fatalf("NewLimiter over a store with no local-first layer: %v; want the leased and async rules refused, naming localfirst", err)
					}
					return
				}
				if err != nil {
					t.Fatalf("NewLimiter refused leased and async rules: %v", err)
				}
				for _, c := range []struct {
					method string
					want   floodgate.Source
				}{{"/leased", floodgate.SourceLease}, {"/async", floodgate.SourceAsync}} {
					var seen []floodgate.Source
					for i := 0; i < 50 && (len(seen) == 0 || seen[len(seen)-1] != c.want); i++ {
						d, _ := admit(t, l, c.method, "u")
						if !d.Allowed {
							t.Fatalf("%s: request %d denied: %+v", c.method, i, d)
						}
						seen = append(seen, d.Source)
					}
					if seen[len(seen)-1] != c.want {
						t.Errorf("%s: sources %v, never %s", c.method, seen, c.want)
					}
				}
			})
		})
	}
}

// TestLedgerMustReport: a local-first store refuses a ledger that
// forwards report calls to a store that takes none (an instrumented
// fallback store), at construction.
func TestLedgerMustReport(t *testing.T) {
	obs, err := fgotel.New()
	if err != nil {
		t.Fatal(err)
	}
	m, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	f, err := fallback.New(m)
	if err != nil {
		t.Fatal(err)
	}
	ledger, ok := obs.Store(f).(quota.Reporter)
	if !ok {
		t.Fatal("the otel store wrapper does not forward Report and Resolve")
	}
	if _, err := localfirst.New(f, ledger); err == nil || !strings.Contains(err.Error(), "ledger") {
		t.Fatalf("localfirst.New with an instrumented fallback store as the ledger: %v, want it refused", err)
	}
	if got := quota.Settles(obs.Store(f)); !got {
		t.Error("quota.Settles(otel over fallback over memstore) = false")
	}
}
