package interceptor

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/testing/clock"
)

// wrapPolicy has a rule that matches on a header, a methods: cost and
// priority, and a rule keyed on user, a scope no extractor fills here.
const wrapPolicy = `
rules:
  - name: mobile
    match: {header: {x-client-type: [mobile]}}
    rate: 10/1m
  - name: per-user
    key: [user]
    rate: 100/1m
methods:
  "GET /v1/items/{id}": {cost: 5, priority: critical}
`

// counting is what a user writes around a stage (to count, time or log
// it): it follows floodgate's unwrap convention.
type counting struct {
	next floodgate.Admitter
	n    atomic.Int64
}

func (c *counting) Admit(ctx context.Context, r *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
	c.n.Add(1)
	return c.next.Admit(ctx, r)
}

func (c *counting) Unwrap() floodgate.Admitter { return c.next }

// opaque wraps a stage without Unwrap: what the stage offers is hidden.
type opaque struct{ next floodgate.Admitter }

func (o opaque) Admit(ctx context.Context, r *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
	return o.next.Admit(ctx, r)
}

// TestUserWrapperKeepsCapabilities: a *tiers.Limiter behind a user's
// wrapper (or several, or a Chain, or the interceptor's own observer)
// keeps what the interceptor finds on it through the unwrap convention:
// its header rules (the header is copied into the Request), its methods:
// cost and priority, and its scope check (WithStrictIdentity refuses the
// rule keyed on user). A wrapper without Unwrap hides all three.
func TestUserWrapperKeepsCapabilities(t *testing.T) {
	for _, tc := range []struct {
		name  string
		wrap  func(floodgate.Admitter) floodgate.Admitter
		opts  []Option
		found bool
	}{
		{"the limiter itself", func(a floodgate.Admitter) floodgate.Admitter { return a }, nil, true},
		{"a user's wrapper", func(a floodgate.Admitter) floodgate.Admitter { return &counting{next: a} }, nil, true},
		{"wrapped twice", func(a floodgate.Admitter) floodgate.Admitter { return &counting{next: &counting{next: a}} }, nil, true},
		{"a wrapper around a chain", func(a floodgate.Admitter) floodgate.Admitter { return &counting{next: floodgate.Chain{a}} }, nil, true},
		{"a chain of a wrapper", func(a floodgate.Admitter) floodgate.Admitter { return floodgate.Chain{&counting{next: a}} }, nil, true},
		{"a wrapper, observed", func(a floodgate.Admitter) floodgate.Admitter { return &counting{next: a} },
			[]Option{WithObserver(floodgate.ObserverFunc(func(context.Context, *floodgate.Request, floodgate.Decision, error) {}))}, true},
		{"a wrapper without Unwrap", func(a floodgate.Admitter) floodgate.Admitter { return opaque{next: a} }, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			captureSlog(t) // the per-user rule's warning
			clk := clock.New(time.Time{})
			rec := &stage{}
			srv := muxServer(t, mustHTTP(floodgate.Chain{tc.wrap(limiterAt(t, clk, wrapPolicy)), rec}, tc.opts...))

			// methods: cost 5 over a mobile rule of 10: two calls pass,
			// the third is denied (with cost 1 it would pass).
			for i := range 2 {
				if res := get(t, srv, "GET", "/v1/items/1", "X-Client-Type", "mobile"); res.status != 200 {
					t.Fatalf("call %d: %d %s", i, res.status, res.body)
				}
			}
			third := get(t, srv, "GET", "/v1/items/1", "X-Client-Type", "mobile")
			r := rec.requests()[0]
			got := fmt.Sprintf("cost %d priority %v headers %q third %d", r.Cost, r.Priority, r.Headers, third.status)
			want := `cost 5 priority critical headers [{"x-client-type" "mobile"}] third 429`
			if !tc.found {
				want = `cost 0 priority read headers [] third 200`
			}
			if got != want {
				t.Errorf("got %s, want %s", got, want)
			}

			panicked := func() (msg string) {
				defer func() { msg = fmt.Sprint(recover()) }()
				MustNew(WithStrictIdentity()).HTTP(tc.wrap(limiterAt(t, clk, wrapPolicy)))
				return ""
			}()
			refused := strings.Contains(panicked, `rule "per-user"`)
			if refused != tc.found {
				t.Errorf("WithStrictIdentity refused the per-user rule: %v, want %v (panic %q)", refused, tc.found, panicked)
			}
		})
	}
}
