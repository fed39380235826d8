package redisstore

import (
	"context"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"
)

// batcher sends the takes of concurrent callers as pipelines: each flusher
// goroutine takes the first waiting take, adds every other take already
// waiting (up to max), and sends them all in one pipeline. A lone take goes
// out at once; under load, takes that arrive while a pipeline is in flight
// share the next one, so the round trips (and syscalls, on both sides) per
// decision fall as concurrency rises. Each take stays one atomic EVALSHA.
type batcher struct {
	s    *Store
	ch   chan *pending
	max  int
	wg   sync.WaitGroup
	once sync.Once
	quit chan struct{}
}

// pending is one take waiting in a batch.
type pending struct {
	c    *call
	cmd  *redis.IntSliceCmd
	done chan struct{}
}

var pendingPool = sync.Pool{New: func() any { return &pending{done: make(chan struct{}, 1)} }}

func newBatcher(s *Store, flushers, max int) *batcher {
	b := &batcher{s: s, ch: make(chan *pending, flushers*max), max: max, quit: make(chan struct{})}
	b.wg.Add(flushers)
	for i := 0; i < flushers; i++ {
		go b.loop()
	}
	return b
}

func (b *batcher) close() {
	b.once.Do(func() { close(b.quit) })
	b.wg.Wait()
}

func (b *batcher) loop() {
	defer b.wg.Done()
	batch := make([]*pending, 0, b.max)
	for {
		var p *pending
		select {
		case p = <-b.ch:
		case <-b.quit:
			// Send what is still queued; callers arriving later see quit.
			for {
				select {
				case p := <-b.ch:
					b.flush([]*pending{p})
				default:
					return
				}
			}
		}
		batch = append(batch[:0], p)
	fill:
		for len(batch) < b.max {
			select {
			case p := <-b.ch:
				batch = append(batch, p)
			default:
				break fill
			}
		}
		b.flush(batch)
		for i := range batch {
			batch[i] = nil
		}
	}
}

// flush sends batch as one pipeline. Takes answered NOSCRIPT (the script
// cache was emptied) did not run, so they are sent again, by EVAL, in a
// second pipeline for the whole batch; EVAL also reloads the script.
func (b *batcher) flush(batch []*pending) {
	ctx := context.Background()
	pipe := b.s.client.Pipeline()
	for _, p := range batch {
		p.cmd = redis.NewIntSliceCmd(ctx, p.c.args...)
		_ = pipe.Process(ctx, p.cmd)
	}
	_, _ = pipe.Exec(ctx)
	var retry redis.Pipeliner
	for _, p := range batch {
		if isNoScript(p.cmd.Err()) {
			if retry == nil {
				retry = b.s.client.Pipeline()
			}
			p.c.args[0], p.c.args[1] = "eval", takeScript.srcArg
			p.cmd = redis.NewIntSliceCmd(ctx, p.c.args...)
			_ = retry.Process(ctx, p.cmd)
		}
	}
	if retry != nil {
		_, _ = retry.Exec(ctx)
	}
	for _, p := range batch {
		p.done <- struct{}{}
	}
}

// do queues c and waits for its reply. If ctx ends first it returns
// ctx.Err() and marks c abandoned (the flusher still owns it; the take may
// still run in Redis, as with any request whose caller gave up).
func (b *batcher) do(ctx context.Context, c *call) ([]int64, error) {
	p := pendingPool.Get().(*pending)
	p.c = c
	select {
	case b.ch <- p:
	case <-ctx.Done():
		p.c = nil
		pendingPool.Put(p)
		return nil, fmt.Errorf("redisstore: %w", ctx.Err())
	case <-b.quit:
		p.c = nil
		pendingPool.Put(p)
		return nil, errClosed
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		c.abandoned = true
		return nil, fmt.Errorf("redisstore: %w", ctx.Err())
	case <-b.quit:
		c.abandoned = true
		return nil, errClosed
	}
	vals, err := p.cmd.Result()
	p.c, p.cmd = nil, nil
	pendingPool.Put(p)
	if err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	return vals, nil
}
