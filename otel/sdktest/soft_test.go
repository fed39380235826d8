package sdktest

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/interceptor"
	fgotel "github.com/floodgate-go/floodgate/otel"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// TestSoftExceeded: HTTP calls through the interceptor and a real
// rate-limit stage with a soft rule (memstore, fake time): the calls over
// the soft rule are admitted, their spans carry floodgate.soft_exceeded
// naming it, and floodgate.soft_exceeded counts them by policy, exactly;
// the calls within it carry no such attribute.
func TestSoftExceeded(t *testing.T) {
	h := newHarness(t)
	p, err := tiers.Load([]byte(`
rules:
  - {name: plan, key: [tenant], rate: 2/1m, soft: true}
  - {name: burst, key: [tenant], rate: 3/1m, soft: true}
  - {name: per-tenant, key: [tenant], rate: 100/1m}
`))
	if err != nil {
		t.Fatal(err)
	}
	st, err := memstore.New(memstore.WithClock(clock.New(time.Time{})))
	if err != nil {
		t.Fatal(err)
	}
	l, err := tiers.NewLimiter(st, p)
	if err != nil {
		t.Fatal(err)
	}
	fg := mustInterceptor(interceptor.WithObserver(h.obs), interceptor.WithTenant(interceptor.FromHeader("x-tenant")),
		interceptor.WithRoute(func(*http.Request) string { return "GET /v1/complete" }))
	inner := fg.HTTP(l)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, span := h.tp.Tracer("test").Start(r.Context(), "server")
		defer span.End()
		inner.ServeHTTP(w, r.WithContext(ctx))
	})
	want := []string{"", "", "plan", "plan,burst", "plan,burst"}
	for i := range want {
		req := httptest.NewRequest("GET", "/v1/complete", nil)
		req.Header.Set("x-tenant", "acme")
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("call %d: %d", i+1, rec.Code)
		}
	}
	spans := h.rec.Ended()
	if len(spans) != len(want) {
		t.Fatalf("%d spans, want %d", len(spans), len(want))
	}
	for i, s := range spans {
		got, ok := attrMap(s.Attributes())[string(fgotel.AttrSoftExceeded)]
		switch {
		case want[i] == "" && ok:
			t.Errorf("call %d: floodgate.soft_exceeded %q on a call within every soft limit", i+1, got)
		case want[i] != "" && got != "STRING:"+want[i]:
			t.Errorf("call %d: floodgate.soft_exceeded %q, want %q", i+1, got, want[i])
		}
	}
	m, ok := h.collect(t)["floodgate.soft_exceeded"]
	if !ok {
		t.Fatal("no floodgate.soft_exceeded metric")
	}
	equalLines(t, "floodgate.soft_exceeded", intPoints[sum](t, m), []string{
		enc(fgotel.AttrPolicy.String("plan")) + "=3",
		enc(fgotel.AttrPolicy.String("burst")) + "=2",
	})
}
