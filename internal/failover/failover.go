// Package failover decides when a Redis Cluster client reloads its slot
// map after a call failed, for every package that talks to Redis (the
// store, fleet membership, the fleet in-flight caps and the fleet
// shedder): a promoted replica sends no MOVED for the slots of a dead
// master, and go-redis otherwise reloads the map only on MOVED, READONLY
// or every ClusterStateReloadInterval (60 s by default), so a caller
// would keep sending to the dead address that long.
package failover

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Follow asks client, when it is a cluster client, to reload its slot map
// when err says the node it sent to may no longer serve the slot: the
// connection failed or timed out (a dead or unreachable master), or Redis
// answered CLUSTERDOWN (a master failed and its replica is not yet
// promoted). Any other reply of Redis, a cancelled call and a closed
// client change nothing. go-redis runs one reload at a time and at most
// one every 200 ms, however many calls fail, so callers need not ration
// it.
func Follow(client redis.UniversalClient, err error) {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, redis.ErrClosed) {
		return
	}
	cc, ok := client.(*redis.ClusterClient)
	if !ok {
		return
	}
	var reply redis.Error
	if errors.As(err, &reply) && !strings.HasPrefix(reply.Error(), "CLUSTERDOWN") {
		return
	}
	cc.ReloadState(context.Background())
}
