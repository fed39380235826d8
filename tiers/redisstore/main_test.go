package redisstore

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/testing/redistest"
)

// sharedCluster is the Redis Cluster that this package's tests share when
// all they do is take, settle, report and read keys of their own (see
// redistest.SharedCluster); the tests that pause or kill a node, flush
// scripts, run a node out of memory or move a slot start their own.
var sharedCluster redistest.SharedCluster

func TestMain(m *testing.M) { os.Exit(sharedCluster.Run(m)) }

// SharedCluster returns a client of the shared cluster and a key prefix
// no other test's keys have: a store built WithPrefix(prefix) keeps to
// keys of t's own.
func SharedCluster(t testing.TB) (c *redis.ClusterClient, prefix string) {
	t.Helper()
	return sharedCluster.Client(t), sharedCluster.Prefix(t)
}

// WaitFor polls cond every 5 ms until it holds, failing t with what did
// not happen after 10 s: a wait for an event, bounded many times over
// what it takes on a loaded machine.
func WaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
	}
}

// PausesHeld sets a node timeout of a minute on every master of cl, a
// cluster of the test's own that forms with redistest's 2 s: a test that
// pauses masters until an event, which a busy machine may delay past
// 2 s, must not have the other masters (or, all of them paused, each
// other once resumed) mark a paused one failed and the cluster down.
func PausesHeld(t testing.TB, cl *redistest.Cluster) {
	t.Helper()
	for _, n := range cl.Nodes() {
		if err := n.Client().ConfigSet(context.Background(), "cluster-node-timeout", "60000").Err(); err != nil {
			t.Fatalf("CONFIG SET cluster-node-timeout on %s: %v", n.Addr(), err)
		}
	}
}
