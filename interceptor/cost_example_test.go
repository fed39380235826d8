package interceptor_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/interceptor"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// WithCost estimates a call's cost before it is admitted (here from a
// header); a rule that settles charges the estimate, and the handler
// reports what the call really cost with floodgate.ReportCost.
func ExampleWithCost() {
	policy, _ := tiers.Load([]byte(`
rules:
  - {name: tenant-tokens, key: [tenant], rate: 1000/1h, settle: true}
`))
	store, _ := memstore.New(memstore.WithClock(clock.New(time.Time{}))) // time stands still: the output is exact
	limits, _ := tiers.NewLimiter(store, policy)
	fg, err := interceptor.New(
		interceptor.WithTenant(interceptor.FromHeader("X-Tenant")),
		interceptor.WithCost(func(_ context.Context, _ string, md interceptor.Metadata) int64 {
			n, _ := strconv.ParseInt(md.Get("X-Max-Tokens"), 10, 64)
			return n // 0 (absent, unparsable): the method's cost
		}),
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	mw := fg.HTTP(limits)
	mux := http.NewServeMux()
	mux.Handle("POST /v1/complete", mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// ... generate the completion ...
		_ = floodgate.ReportCost(r.Context(), 120) // it took 120 tokens
	})))
	for range 2 {
		req := httptest.NewRequest("POST", "/v1/complete", nil)
		req.Header.Set("X-Tenant", "acme")
		req.Header.Set("X-Max-Tokens", "500")
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		fmt.Println(rec.Code, rec.Header().Get("RateLimit"))
	}
	// Output:
	// 200 "tenant-tokens";r=500;t=1800
	// 200 "tenant-tokens";r=380;t=2232
}
