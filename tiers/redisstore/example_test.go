package redisstore_test

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// Example charges a three-level hierarchy (tenant, user, IP) in one round
// trip: the tenant's plan admits 2 per hour, so the third request is
// denied and the user and IP levels are not charged for it.
func Example() {
	addr, stop := exampleRedis() // a throwaway redis-server for this example
	defer stop()

	client, err := redisstore.NewClient("redis://" + addr)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()
	st, err := redisstore.New(client, redisstore.WithPrefix("example:"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close() // stops the batching goroutines
	buckets := []quota.Bucket{
		{Key: "{tenant=acme}:plan", Limit: quota.Limit{Algorithm: quota.FixedWindow, Rate: 2, Period: time.Hour}, Cost: 1},
		{Key: "{user=ann}:search", Limit: quota.Limit{Algorithm: quota.TokenBucket, Rate: 10, Period: time.Second, Burst: 20}, Cost: 1},
		{Key: "{ip=192.0.2.1}:safety", Limit: quota.Limit{Algorithm: quota.SlidingWindowLog, Rate: 100, Period: time.Minute}, Cost: 1},
	}
	res := make([]quota.Result, len(buckets))
	for i := 0; i < 3; i++ {
		allowed, err := st.Take(context.Background(), buckets, res)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("request %d: allowed=%v tenant remaining=%d user remaining=%d ip remaining=%d\n",
			i+1, allowed, res[0].Remaining, res[1].Remaining, res[2].Remaining)
	}
	// Output:
	// request 1: allowed=true tenant remaining=1 user remaining=19 ip remaining=99
	// request 2: allowed=true tenant remaining=0 user remaining=18 ip remaining=98
	// request 3: allowed=false tenant remaining=0 user remaining=18 ip remaining=98
}

// ExampleWithBatching: 50 concurrent callers of a batched store share a
// few script calls, and each take is still decided on its own: a tenant
// allowing 20 per hour admits exactly 20 of the 50.
func ExampleWithBatching() {
	addr, stop := exampleRedis()
	defer stop()

	client, err := redisstore.NewClient("redis://" + addr)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()
	st, err := redisstore.New(client, redisstore.WithBatching(2, 64))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close() // stops the batching goroutines

	tenant := quota.Limit{Algorithm: quota.GCRA, Rate: 20, Period: time.Hour, Burst: 20}
	var wg sync.WaitGroup
	var admitted atomic.Int64
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var res [1]quota.Result
			ok, err := st.Take(context.Background(), []quota.Bucket{{Key: "{tenant=acme}:plan", Limit: tenant, Cost: 1}}, res[:])
			if err == nil && ok {
				admitted.Add(1)
			}
		}()
	}
	wg.Wait()
	fmt.Println("admitted:", admitted.Load())
	// Output:
	// admitted: 20
}

// exampleRedis starts redis-server on a free loopback port without
// persistence and returns its address and a function that stops it. Tests
// use testing/redistest instead, which needs a testing.TB.
func exampleRedis() (string, func()) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		panic("redis-server: " + err.Error() + " (run `make deps`)")
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	stop := func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	for i := 0; i < 500; i++ {
		if c.Ping(context.Background()).Err() == nil {
			return addr, stop
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	panic("redis-server did not answer PING within 5s")
}
