package redistest_test

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/testing/redistest"
)

// TestStartClusterProcess: the cluster a program (not a test) starts forms
// (every master serves slots, a write and a read route through a cluster
// client), and Stop kills every node.
func TestStartClusterProcess(t *testing.T) {
	p, err := redistest.StartClusterProcess()
	if err != nil {
		t.Fatal(err)
	}
	addrs := p.Addrs()
	if len(addrs) != redistest.ClusterSize {
		p.Stop()
		t.Fatalf("%d masters, want %d", len(addrs), redistest.ClusterSize)
	}
	ctx := context.Background()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer c.Close()
	for _, k := range []string{"{a}", "{b}", "{c}"} {
		if err := c.Set(ctx, k, "v", 0).Err(); err != nil {
			p.Stop()
			t.Fatalf("SET %s: %v", k, err)
		}
	}
	info, err := c.ClusterInfo(ctx).Result()
	if err != nil || !strings.Contains(info, "cluster_state:ok") {
		p.Stop()
		t.Fatalf("CLUSTER INFO: %v %q", err, info)
	}
	p.Stop()
	for _, a := range addrs {
		n := redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1})
		if err := n.Ping(ctx).Err(); err == nil {
			t.Errorf("%s still answers after Stop", a)
		}
		n.Close()
	}
}
