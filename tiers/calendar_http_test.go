package tiers_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/interceptor"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// A monthly quota denied two hours before the month ends in its zone
// tells the client so: Retry-After, the RateLimit field's t and gRPC's
// RetryInfo are the 7200 s to midnight of the 1st in Europe/Berlin, and
// RateLimit-Policy's window is January's 31 days.
func TestCalendarDenyHeaders(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.New(time.Date(2026, 1, 31, 22, 0, 0, 0, berlin))
	l := mustLimiter(t, newMemstore(t, memstore.WithClock(clk)), `
rules:
  - {name: plan, key: [ip], rate: 2/month, time_zone: Europe/Berlin}
`, tiers.WithClock(clk))
	fg, err := interceptor.New(interceptor.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	h := fg.HTTP(l)(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	var rec *httptest.ResponseRecorder
	for range 3 {
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/x", nil))
	}
	if rec.Code != http.StatusTooManyRequests {
		t.Fatalf("third request: %d, want 429", rec.Code)
	}
	for k, want := range map[string]string{
		"Retry-After":      "7200",
		"Ratelimit":        `"plan";r=0;t=7200`,
		"Ratelimit-Policy": `"plan";q=2;w=2678400`,
	} {
		if got := rec.Header().Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}

	d := admit(t, l, &floodgate.Request{Method: "/a.B/C", Identity: floodgate.Identity{IP: netip.MustParseAddr("192.0.2.1")}})
	for _, det := range interceptor.DenyStatus(d, "example.com").Details() {
		if ri, ok := det.(*errdetails.RetryInfo); ok {
			if got := ri.RetryDelay.AsDuration(); got != 2*time.Hour {
				t.Fatalf("RetryInfo %v, want 2h", got)
			}
			return
		}
	}
	t.Fatalf("no RetryInfo in the gRPC status of %+v", d)
}
