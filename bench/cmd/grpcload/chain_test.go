package main

import (
	"context"
	"net/netip"
	"strconv"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/shedder"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// BenchmarkStageAdmit measures each stage of the bench's chain alone
// (Admit then Done, no transport), with the options chain uses, so the
// allocations the chain adds per RPC in grpcload can be split between the
// stages and the interceptors:
//
//	go test -run '^$' -bench StageAdmit -benchmem ./cmd/grpcload
func BenchmarkStageAdmit(b *testing.B) {
	shed, err := shedder.New(10_000)
	if err != nil {
		b.Fatal(err)
	}
	conc, err := concurrency.New(concurrency.WithGlobal(10_000), concurrency.WithPerKey(concurrency.PerKey{
		Name: "user-in-flight", Cap: 100,
		Key: func(r *floodgate.Request) (string, bool) { return r.Identity.User, true },
	}))
	if err != nil {
		b.Fatal(err)
	}
	stages := []struct {
		name string
		a    floodgate.Admitter
	}{{"shedder", shed}, {"concurrency", conc}}
	for _, levels := range []int{1, 4} {
		store, err := memstore.New()
		if err != nil {
			b.Fatal(err)
		}
		lim, err := tiers.NewLimiter(store, policy(levels, quota.Exact, false))
		if err != nil {
			b.Fatal(err)
		}
		stages = append(stages, struct {
			name string
			a    floodgate.Admitter
		}{"tiers-mem-" + strconv.Itoa(levels), lim})
	}
	// Principals as grpcload's client sends them, cycled so no bucket
	// gets near its limit (each sees one request per 10 000).
	reqs := make([]floodgate.Request, 10_000)
	for k := range reqs {
		ks := strconv.Itoa(k)
		reqs[k] = floodgate.Request{
			Method: "/floodgate.test.v1.Echo/Plain",
			Identity: floodgate.Identity{
				Tenant: "t" + strconv.Itoa(k/100), User: "u" + ks, APIKey: "key-" + ks,
				IP: netip.MustParseAddr("127.0.0.1"),
			},
		}
	}
	ctx := context.Background()
	for _, s := range stages {
		b.Run(s.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				r := &reqs[i%len(reqs)]
				i++
				d, done, err := s.a.Admit(ctx, r)
				if err != nil || !d.Allowed {
					b.Fatalf("denied: %+v, %v", d, err)
				}
				if done != nil {
					done(floodgate.Result{})
				}
			}
		})
	}
}
