package fallback_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/floodgate-go/floodgate/fallback"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// downStore stands for a Redis store whose server is gone.
type downStore struct{}

func (downStore) Take(context.Context, []quota.Bucket, []quota.Result) (bool, error) {
	return false, errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")
}

// A guarded store in front of a primary that is down: the breaker opens
// after two failures, and each rule decides by its on_store_error.
func Example() {
	clk := clock.New(time.Time{})
	store, err := fallback.New(downStore{},
		fallback.WithInstances(func() int { return 4 }), // four instances share each quota
		fallback.WithFailures(2),                        // two failures in a row open the breaker
		fallback.WithTimeout(5*time.Millisecond),
		fallback.WithClock(clk),
		fallback.WithLogger(slog.New(slog.DiscardHandler)),
		fallback.WithOnStateChange(func(name string, from, to gobreaker.State) {
			fmt.Printf("breaker %s: %s -> %s\n", name, from, to)
		}),
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	api := quota.Bucket{Key: "api:{alice}", Cost: 1, OnStoreError: quota.FailLocal,
		Limit: quota.Limit{Algorithm: quota.TokenBucket, Rate: 400, Period: time.Second, Burst: 8}}
	login := quota.Bucket{Key: "login:{alice}", Cost: 1, OnStoreError: quota.FailClosed,
		Limit: quota.Limit{Algorithm: quota.SlidingWindowLog, Rate: 5, Period: time.Minute}}

	res := make([]quota.Result, 1)
	for i := 0; i < 3; i++ {
		ok, _ := store.Take(context.Background(), []quota.Bucket{api}, res)
		fmt.Printf("api: allowed=%v source=%s remaining=%d\n", ok, res[0].Source, res[0].Remaining)
	}
	ok, _ := store.Take(context.Background(), []quota.Bucket{login}, res)
	fmt.Printf("login: allowed=%v source=%s retry-after=%s\n", ok, res[0].Source, res[0].RetryAfter)
	st := store.Stats()
	fmt.Printf("local allowed=%d denied=%d, closed denied=%d\n",
		st.Mode(quota.FailLocal).Allowed, st.Mode(quota.FailLocal).Denied, st.Mode(quota.FailClosed).Denied)
	// Output:
	// api: allowed=true source=local_fallback remaining=1
	// breaker floodgate-store: closed -> open
	// api: allowed=true source=local_fallback remaining=0
	// api: allowed=false source=local_fallback remaining=0
	// login: allowed=false source=fail_closed retry-after=1s
	// local allowed=2 denied=1, closed denied=1
}

// New wraps any quota.Store; while the primary answers, its results pass
// through untouched.
func ExampleNew() {
	primary, err := memstore.New(memstore.WithClock(clock.New(time.Time{})))
	if err != nil {
		fmt.Println(err)
		return
	}
	store, err := fallback.New(primary, fallback.WithInstances(func() int { return 3 }), fallback.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		fmt.Println(err)
		return
	}
	b := []quota.Bucket{{Key: "user:{bob}", Cost: 1,
		Limit: quota.Limit{Algorithm: quota.GCRA, Rate: 10, Period: time.Second, Burst: 2}}}
	res := make([]quota.Result, 1)
	for i := 0; i < 3; i++ {
		ok, _ := store.Take(context.Background(), b, res)
		fmt.Printf("allowed=%v degraded=%v\n", ok, res[0].Source.Degraded())
	}
	_, err = fallback.New(primary, fallback.WithInstances(nil))
	fmt.Println(err)
	// Output:
	// allowed=true degraded=false
	// allowed=true degraded=false
	// allowed=false degraded=false
	// fallback: New: WithInstances(nil): the count func must not be nil
}

// goneAway stands for a Redis store that goes away and comes back: its
// takes fail while down is set; its report calls (the hand-over) go to
// the in-process store it embeds.
type goneAway struct {
	*memstore.Store
	down bool
}

func (g *goneAway) Take(ctx context.Context, b []quota.Bucket, res []quota.Result) (bool, error) {
	if g.down {
		return false, errors.New("dial tcp 10.0.0.7:6379: connect: connection refused")
	}
	return g.Store.Take(ctx, b, res)
}

// Close at shutdown hands the units admitted locally while the primary
// was away over to it, so the fleet's ledger counts them after this
// process is gone. It does not close the primary: close that (and its
// Redis client) after.
func ExampleStore_Close() {
	clk := clock.New(time.Time{})
	mem, err := memstore.New(memstore.WithClock(clk))
	if err != nil {
		fmt.Println(err)
		return
	}
	primary := &goneAway{Store: mem, down: true}
	store, err := fallback.New(primary, fallback.WithClock(clk), fallback.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		fmt.Println(err)
		return
	}
	b := []quota.Bucket{{Key: "api:{carol}", Cost: 1, OnStoreError: quota.FailLocal,
		Limit: quota.Limit{Algorithm: quota.TokenBucket, Rate: 10, Period: time.Hour, Burst: 10}}}
	res := make([]quota.Result, 1)
	for i := 0; i < 3; i++ {
		ok, _ := store.Take(context.Background(), b, res)
		fmt.Printf("allowed=%v source=%s\n", ok, res[0].Source)
	}
	primary.down = false // the primary is back; the process shuts down
	fmt.Println("owed before Close:", store.Stats().Owed)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	fmt.Println("Close:", store.Close(ctx))
	fmt.Println("owed after Close:", store.Stats().Owed)
	read := []quota.Bucket{b[0]}
	read[0].Cost = 0
	_, _ = mem.Take(context.Background(), read, res)
	fmt.Println("the primary holds:", res[0].Remaining)
	// Output:
	// allowed=true source=local_fallback
	// allowed=true source=local_fallback
	// allowed=true source=local_fallback
	// owed before Close: 3
	// Close: <nil>
	// owed after Close: 0
	// the primary holds: 7
}
