package redisstore_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/internal/lateanswer"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// TestLateAnswer: a batched take whose caller's context ends while Redis
// is paused is still sent; Take returns the context's error, and the
// answer Redis gives when it resumes reaches the lateanswer.Receiver in the
// context: allowed, with what the bucket holds after the charge, which a
// later take confirms. A take without a Receiver is abandoned as
// before, and a store with batching off does not claim to answer late.
// The caller gives up (its context cancelled) when a hook sees the take's
// call leave for the paused Redis: the order holds on any machine.
func TestLateAnswer(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	srv := redistest.Start(t)
	c := srv.Client()
	var giveUp atomic.Pointer[context.CancelFunc]
	c.AddHook(scriptHook{func(redis.Cmder) {
		if cancel := giveUp.Swap(nil); cancel != nil {
			(*cancel)()
		}
	}})
	st, err := redisstore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if !st.AnswersLate() {
		t.Fatal("AnswersLate() = false with batching on, on a standalone Redis")
	}
	b := quota.Bucket{Key: "late", Limit: quota.Limit{Algorithm: quota.TokenBucket, Rate: 1, Period: time.Hour, Burst: 10}, Cost: 3}
	res := make([]quota.Result, 1)
	if ok, err := st.Take(context.Background(), []quota.Bucket{b}, res); !ok || err != nil {
		t.Fatalf("first take: %v %v", ok, err)
	}

	sink := &redisstore.LateSink{Got: make(chan redisstore.LateAnswer, 1)}
	srv.Pause()
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), lateanswer.Key, lateanswer.Receiver(sink)))
	giveUp.Store(&cancel)
	_, err = st.Take(ctx, []quota.Bucket{b}, res)
	cancel()
	srv.Resume()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Take during the pause, given up: %v, want the context's error", err)
	}
	if len(sink.Buckets) != 1 || sink.Buckets[0].Key != "late" {
		t.Fatalf("Late was given %+v, want the take's bucket", sink.Buckets)
	}
	var a redisstore.LateAnswer
	select {
	case a = <-sink.Got:
	case <-time.After(10 * time.Second):
		t.Fatal("no late answer within 10s of Redis resuming")
	}
	if a.Err != nil || !a.Allowed || len(a.Res) != 1 || a.Res[0].Remaining != 4 || a.Res[0].Limit != 10 {
		t.Fatalf("late answer %+v, want allowed with 4 of 10 left", a)
	}
	b.Cost = 0
	if _, err := st.Take(context.Background(), []quota.Bucket{b}, res); err != nil || res[0].Remaining != 4 {
		t.Fatalf("read after the late take: %v, %d left; want 4", err, res[0].Remaining)
	}

	unbatched, err := redisstore.New(srv.Client(), redisstore.WithBatching(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if unbatched.AnswersLate() {
		t.Error("AnswersLate() = true with batching off: an unbatched take's answer is lost with its caller")
	}
}
