package rls_test

import (
	"context"
	"strconv"
	"testing"

	extrlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-go/floodgate/rls"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// BenchmarkShouldRateLimit measures one call of four descriptors, without
// the transport, over the in-process store.
func BenchmarkShouldRateLimit(b *testing.B) {
	p, err := tiers.Load([]byte(`
rules:
  - {name: per-ip, key: [ip], rate: 1000000000/1m, algorithm: fixed_window}
  - {name: per-tenant, key: [tenant], rate: 1000000000/1m, algorithm: fixed_window}
  - {name: per-user, key: [user], rate: 1000000000/1m, algorithm: fixed_window}
  - {name: search-user, key: [user], rate: 1000000000/1m, algorithm: fixed_window}
rls:
  - domain: bench
    descriptors:
      - entries: [{key: remote_address, as: ip}]
        rule: per-ip
      - entries: [{key: tenant, as: tenant}]
        rule: per-tenant
      - entries: [{key: user, as: user}]
        rule: per-user
      - entries: [{key: generic_key, value: search}, {key: user, as: user}]
        rule: search-user
`))
	if err != nil {
		b.Fatal(err)
	}
	store, err := memstore.New()
	if err != nil {
		b.Fatal(err)
	}
	l, err := tiers.NewLimiter(store, p)
	if err != nil {
		b.Fatal(err)
	}
	srv, err := rls.New(l, rls.WithLogger(quiet))
	if err != nil {
		b.Fatal(err)
	}
	reqs := make([]*rlsv3.RateLimitRequest, 1000)
	for k := range reqs {
		u := "u" + strconv.Itoa(k)
		reqs[k] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*extrlsv3.RateLimitDescriptor{
			d("remote_address", "198.18."+strconv.Itoa(k/256)+"."+strconv.Itoa(k%256)), d("tenant", "t"+strconv.Itoa(k/100)), d("user", u), d("generic_key", "search", "user", u)}}
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		resp, err := srv.ShouldRateLimit(ctx, reqs[i%len(reqs)])
		if err != nil || resp.OverallCode != ok {
			b.Fatal(resp, err)
		}
	}
}
