package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/tiers/memstore"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// diffRig is what a differential trace (differential,
// differentialReports, differentialShaping) runs on: the Redis store (no
// denial cache) and memstore, the model it must match, on one fake clock;
// the trace's random source; and a key prefix of its own.
type diffRig struct {
	t      *testing.T
	ctx    context.Context
	clk    *clock.Fake
	rs     *redisstore.Store
	ms     *memstore.Store
	rng    *rand.Rand
	prefix string
}

// rigs numbers the rigs of this test binary, so that each rig's keys are
// its own: on the shared cluster, also when a test runs again (-count).
var rigs atomic.Uint64

// newDiffRig returns the rig of one trace on client: its random source
// seeded with seed and stream, its keys prefixed with name, seed and the
// rig's number.
func newDiffRig(t *testing.T, client redis.UniversalClient, name string, seed, stream uint64) *diffRig {
	t.Helper()
	clk := clock.New(time.Time{})
	ms, err := memstore.New(memstore.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	return &diffRig{
		t:      t,
		ctx:    context.Background(),
		clk:    clk,
		rs:     fakeTimeStore(t, client, clk, redisstore.WithDenialCache(0)),
		ms:     ms,
		rng:    rand.New(rand.NewPCG(seed, stream)),
		prefix: fmt.Sprintf("%s%d.%d:", name, seed, rigs.Add(1)),
	}
}

// at names a step of the trace for a failure: its number and the fake
// time since clock.Epoch.
func (d *diffRig) at(step int) string {
	return fmt.Sprintf("step %d (t=%v)", step, d.clk.Now().Sub(clock.Epoch))
}

// take runs one Take of bs on both stores and fails the test unless they
// decide alike and give the same result for every bucket (Source aside);
// it returns the decision and the results.
func (d *diffRig) take(step int, bs []quota.Bucket) (bool, []quota.Result) {
	d.t.Helper()
	want := make([]quota.Result, len(bs))
	got := make([]quota.Result, len(bs))
	wok, err := d.ms.Take(d.ctx, bs, want)
	if err != nil {
		d.t.Fatalf("%s: memstore: %v", d.at(step), err)
	}
	gok, err := d.rs.Take(d.ctx, bs, got)
	if err != nil {
		d.t.Fatalf("%s: redisstore: %v", d.at(step), err)
	}
	if gok != wok {
		d.t.Fatalf("%s: allowed %v, memstore %v", d.at(step), gok, wok)
	}
	for i := range bs {
		g, w := got[i], want[i]
		g.Source, w.Source = "", ""
		if g != w {
			d.t.Fatalf("%s bucket %s cost %d max wait %v:\n got  %+v\n want %+v", d.at(step), bs[i].Key, bs[i].Cost, bs[i].MaxWait, g, w)
		}
	}
	return wok, want
}

// seeds runs trace on client once for each seed from 1 to n, each in a
// subtest named by its seed.
func seeds(t *testing.T, client redis.UniversalClient, n uint64, trace func(*testing.T, redis.UniversalClient, uint64)) {
	t.Helper()
	for seed := uint64(1); seed <= n; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { trace(t, client, seed) })
	}
}
