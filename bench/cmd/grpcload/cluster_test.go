package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestClusterRows runs the exact 4-level chain and redis_rate on a 3-master
// Redis Cluster the run starts, and the tenant-keyed chain sharded over
// three standalone servers, each for a warm-up and a measured phase of 200
// calls (as TestShortRun): every call is admitted, each row's Redis CPU
// is read from all three masters (each did work: the keys spread over
// them) and summed, and the per-master line is printed. A plain run (no
// -only) has no cluster or shards rows.
func TestClusterRows(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var out bytes.Buffer
	rows, err := run(ctx, []string{"grpcload", "-rounds", "1", "-warmup", "1m", "-duration", "1m", "-max-ops", "200", "-c", "8", "-only", "cluster-redis-4-batch,cluster-redis_rate-1,shards-redis-4-tenant"}, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 {
		t.Fatalf("%d rows, want 3", len(rows))
	}
	for _, r := range rows {
		st := r.Stats
		if st.Ops == 0 || st.Errors != 0 || st.Allowed != st.Ops {
			t.Errorf("%s: %d calls, %d admitted, %d errors (first %v)", r.Name, st.Ops, st.Allowed, st.Errors, st.FirstErr)
		}
		if len(st.RedisNodeCPU) != 3 || !st.RedisCPUKnown {
			t.Fatalf("%s: Redis CPU of %d masters (known %v), want 3", r.Name, len(st.RedisNodeCPU), st.RedisCPUKnown)
		}
		var sum time.Duration
		for i, c := range st.RedisNodeCPU {
			if c <= 0 {
				t.Errorf("%s: master %d spent no CPU", r.Name, i)
			}
			sum += c
		}
		if sum != st.RedisCPU {
			t.Errorf("%s: Redis CPU %s, want the masters' sum %s", r.Name, st.RedisCPU, sum)
		}
		if !strings.Contains(out.String(), r.Name+": redis CPU µs/op per node ") {
			t.Errorf("%s: no per-master line in the output", r.Name)
		}
	}
	cfg, _, err := parseFlags([]string{"grpcload"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range contenders {
		if c.place != standalone && runs(cfg, c) {
			t.Errorf("%s runs without -only naming it", c.name)
		}
	}
}
