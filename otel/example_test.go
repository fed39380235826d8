package otel_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/interceptor"
	"github.com/floodgate-go/floodgate/otel"
)

// Observe every stage of a chain: give the Observer to the interceptor.
// With no options the Observer uses the global providers, which a
// service's main sets up with the OpenTelemetry SDK; here they are the
// default no-ops.
func Example() {
	obs, err := otel.New()
	if err != nil {
		log.Fatal(err)
	}
	limits := floodgate.AdmitFunc(func(context.Context, *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
		return floodgate.Decision{Stage: floodgate.StageTiers, Source: floodgate.SourceStore, Policy: "search", Limit: 20}, nil, nil
	})
	fg, err := interceptor.New(interceptor.WithObserver(obs), interceptor.WithRoute(func(r *http.Request) string { return r.Method + " " + r.URL.Path }))
	if err != nil {
		log.Fatal(err)
	}
	// Each stage's decision is reported to obs: floodgate.decision
	// "limited", floodgate.policy "search".
	h := fg.HTTP(floodgate.Chain{limits})(http.NotFoundHandler())
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/search", nil))
	fmt.Println(rec.Code)
	// Output: 429
}

// Wire the hooks that decisions do not cover: breaker state from the
// fallback store's state-change callback, and in-flight counts around the
// stages.
func ExampleObserver_BreakerStateChanged() {
	obs, err := otel.New()
	if err != nil {
		log.Fatal(err)
	}
	// With package fallback:
	//	fallback.WithOnStateChange(func(name string, from, to gobreaker.State) {
	//		obs.BreakerStateChanged(name, from.String(), to.String())
	//	})
	obs.BreakerStateChanged("redis", "closed", "open")

	conc := floodgate.AdmitFunc(func(context.Context, *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
		return floodgate.Decision{Allowed: true, Stage: floodgate.StageConcurrency, Source: floodgate.SourceConcurrency}, nil, nil
	})
	// floodgate.in_flight{floodgate.stage="concurrency"} is 1 until done runs.
	d, done, _ := obs.TrackInFlight(conc).Admit(context.Background(), &floodgate.Request{})
	done(floodgate.Result{})
	fmt.Println(d.Label())
	// Output: allowed
}
