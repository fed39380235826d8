package floodgate_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/interceptor"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// A plan priced per meter: each budget rule names its meter, the request
// is admitted on each meter's estimate (reported before admission by the
// WithCost func), and the handler reports what each meter really counted
// once the response is done; each budget is settled with its own.
func ExampleReportMeter() {
	policy, err := tiers.Load([]byte(`
rules:
  - {name: input, key: [tenant], rate: 100000/24h, meter: input_tokens, settle: true}
  - {name: output, key: [tenant], rate: 20000/24h, meter: output_tokens, settle: true}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	store, _ := memstore.New(memstore.WithClock(clock.New(time.Time{})))
	limits, err := tiers.NewLimiter(store, policy)
	if err != nil {
		fmt.Println(err)
		return
	}
	fg, err := interceptor.New(
		interceptor.WithTenant(interceptor.FromHeader("X-Tenant")),
		interceptor.WithCost(func(ctx context.Context, _ string, _ interceptor.Metadata) int64 {
			_ = floodgate.ReportMeter(ctx, "input_tokens", 900)   // the prompt's bytes
			_ = floodgate.ReportMeter(ctx, "output_tokens", 1000) // max_tokens
			return 0
		}))
	if err != nil {
		fmt.Println(err)
		return
	}
	h := fg.HTTP(limits)(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		states, _ := limits.Inspect(r.Context(), &floodgate.Request{Identity: floodgate.Identity{Tenant: "acme"}})
		fmt.Println("admitted: input", states[0].Remaining, "output", states[1].Remaining)
		// The completion read 210 prompt tokens and generated 120.
		_ = floodgate.ReportMeter(r.Context(), "input_tokens", 210)
		_ = floodgate.ReportMeter(r.Context(), "output_tokens", 120)
	}))
	req := httptest.NewRequest("POST", "/v1/complete", nil)
	req.Header.Set("X-Tenant", "acme")
	h.ServeHTTP(httptest.NewRecorder(), req)

	states, _ := limits.Inspect(context.Background(), &floodgate.Request{Identity: floodgate.Identity{Tenant: "acme"}})
	fmt.Println("settled: input", states[0].Remaining, "output", states[1].Remaining)
	// Output:
	// admitted: input 99100 output 19000
	// settled: input 99790 output 19880
}
