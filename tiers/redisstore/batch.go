package redisstore

import (
	"context"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"
)

// batcher sends the takes of concurrent callers together: each flusher
// goroutine takes the first waiting take, adds every other take already
// waiting (up to max), and sends them all as ONE take.lua call that decides
// them in order, each all or nothing, as if each were its own call. A lone
// take goes out at once; under load, takes that arrive while a call is in
// flight share the next one, so round trips, script invocations and
// (for a key several takes charge, such as a tenant's) SETs per decision
// fall as concurrency rises.
//
// A take with a sliding window log bucket is sent as its own take.lua
// call, in the same pipeline: take.lua writes the log's entries last, so a
// later take of a merged call could not see them.
type batcher struct {
	s    *Store
	ch   chan *pending
	max  int
	wg   sync.WaitGroup
	once sync.Once
	quit chan struct{}
}

// pending is one take waiting in a batch, and its answer.
type pending struct {
	c    *call
	cmd  *redis.IntSliceCmd // its own call, when sent alone
	now  int64
	seg  []int64 // the take's part of the reply
	err  error
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
	f := &flusher{s: b.s, batch: make([]*pending, 0, b.max)}
	for {
		var p *pending
		select {
		case p = <-b.ch:
		case <-b.quit:
			// Send what is still queued; callers arriving later see quit.
			for {
				select {
				case p := <-b.ch:
					f.batch = append(f.batch[:0], p)
					f.flush()
				default:
					return
				}
			}
		}
		f.batch = append(f.batch[:0], p)
	fill:
		for len(f.batch) < b.max {
			select {
			case p := <-b.ch:
				f.batch = append(f.batch, p)
			default:
				break fill
			}
		}
		f.flush()
		clear(f.batch)
	}
}

// flusher is one flusher goroutine's reusable state.
type flusher struct {
	s      *Store
	batch  []*pending
	merged []*pending // the takes of the merged call
	alone  []*pending // the takes sent as their own call
	m      call       // the merged call's own arguments
}

// flush sends the batch in one pipeline: the takes without a sliding window
// log as one merged call (when there are at least two), the others as
// their own calls. A call answered NOSCRIPT (the script cache was emptied)
// did not run, so it is sent again by EVAL, which also reloads the script.
// Any other error of the merged call is every one of its takes' error; it
// charged none of them (take.lua decides everything before its first
// write, and Redis refuses a script's write only at the first).
func (f *flusher) flush() {
	ctx := context.Background()
	f.merged, f.alone = f.merged[:0], f.alone[:0]
	for _, p := range f.batch {
		if p.c.log {
			f.alone = append(f.alone, p)
		} else {
			f.merged = append(f.merged, p)
		}
	}
	if len(f.merged) == 1 {
		f.alone, f.merged = append(f.alone, f.merged[0]), f.merged[:0]
	}
	var mcmd *redis.IntSliceCmd
	pipe := f.s.client.Pipeline()
	if len(f.merged) > 0 {
		f.buildMerged()
		mcmd = redis.NewIntSliceCmd(ctx, f.m.args...)
		_ = pipe.Process(ctx, mcmd)
	}
	for _, p := range f.alone {
		p.cmd = redis.NewIntSliceCmd(ctx, p.c.args...)
		_ = pipe.Process(ctx, p.cmd)
	}
	_, _ = pipe.Exec(ctx)

	var retry redis.Pipeliner
	if mcmd != nil && isNoScript(mcmd.Err()) {
		retry = f.s.client.Pipeline()
		f.m.args[0], f.m.args[1] = "eval", takeScript.srcArg
		mcmd = redis.NewIntSliceCmd(ctx, f.m.args...)
		_ = retry.Process(ctx, mcmd)
	}
	for _, p := range f.alone {
		if isNoScript(p.cmd.Err()) {
			if retry == nil {
				retry = f.s.client.Pipeline()
			}
			p.c.args[0], p.c.args[1] = "eval", takeScript.srcArg
			p.cmd = redis.NewIntSliceCmd(ctx, p.c.args...)
			_ = retry.Process(ctx, p.cmd)
		}
	}
	if retry != nil {
		_, _ = retry.Exec(ctx)
	}

	if mcmd != nil {
		f.split(mcmd)
	}
	for _, p := range f.alone {
		p.now, p.seg, p.err = splitOne(p.cmd)
	}
	for _, p := range f.batch {
		p.done <- struct{}{}
	}
	f.m.reset()
}

// splitOne returns the time and the take's part of a one-take reply.
func splitOne(cmd *redis.IntSliceCmd) (int64, []int64, error) {
	vals, err := cmd.Result()
	if err != nil {
		return 0, nil, fmt.Errorf("redisstore: %w", err)
	}
	return splitNow(vals)
}

// split hands each take of the merged call its part of the reply.
func (f *flusher) split(cmd *redis.IntSliceCmd) {
	vals, err := cmd.Result()
	if err == nil && len(vals) == 0 {
		err = fmt.Errorf("take.lua replied nothing")
	}
	if err == nil {
		now, o := vals[0], 1
		for _, p := range f.merged {
			if o >= len(vals) {
				err = fmt.Errorf("take.lua replied %d values for %d takes", len(vals), len(f.merged))
				break
			}
			l, _ := takeLen(vals[o], p.c.n, false)
			if o+l > len(vals) {
				err = fmt.Errorf("take.lua replied %d values for %d takes", len(vals), len(f.merged))
				break
			}
			p.now, p.seg = now, vals[o:o+l:o+l]
			o += l
		}
		if err == nil && o != len(vals) {
			err = fmt.Errorf("take.lua replied %d values for %d takes, want %d", len(vals), len(f.merged), o)
		}
	}
	if err != nil {
		for _, p := range f.merged {
			p.seg, p.err = nil, fmt.Errorf("redisstore: %w", err)
		}
	}
}

// buildMerged lays out, in f.m.args, one take.lua call of every take in
// f.merged:
//
//	EVALSHA sha numkeys key... now "t" minttl T limits...
//
// The keys and each take's limits are the takes' own argument buffers; f.m
// holds the counts and the time (the latest of the takes' times, when the
// store has a clock: each take is decided no earlier than it was asked
// for).
func (f *flusher) buildMerged() {
	m := &f.m
	keys, fixed, now := 0, false, int64(0)
	for _, p := range f.merged {
		keys += p.c.n
		if p.c.fixed && (!fixed || p.c.now > now) {
			fixed, now = true, p.c.now
		}
	}
	m.putInt(int64(keys))
	m.putInt(int64(len(f.merged)))
	if fixed {
		m.putInt(now)
	}
	m.finish()
	m.args = append(m.args, "evalsha", takeScript.shaArg, &m.bufs[0])
	for _, p := range f.merged {
		for k := 1; k <= p.c.n; k++ {
			m.args = append(m.args, &p.c.bufs[k])
		}
	}
	if fixed {
		m.args = append(m.args, &m.bufs[2])
	} else {
		m.args = append(m.args, "")
	}
	// minttl is the same for every take of a store: the first take's.
	m.args = append(m.args, modeTake, &f.merged[0].c.bufs[f.merged[0].c.lim-1], &m.bufs[1])
	for _, p := range f.merged {
		m.args = append(m.args, &p.c.bufs[p.c.lim])
	}
}

// do queues c and waits for its answer: the time the script used and the
// take's part of the reply. If ctx ends first it returns ctx.Err() and
// marks c abandoned (the flusher still owns it; the take may still run in
// Redis, as with any request whose caller gave up).
func (b *batcher) do(ctx context.Context, c *call) (int64, []int64, error) {
	p := pendingPool.Get().(*pending)
	p.c = c
	// The queue has room for every flusher's batch, so the send rarely
	// blocks: try it first, without a select over the context and Close.
	select {
	case b.ch <- p:
	default:
		select {
		case b.ch <- p:
		case <-ctx.Done():
			p.c = nil
			pendingPool.Put(p)
			return 0, nil, fmt.Errorf("redisstore: %w", ctx.Err())
		case <-b.quit:
			p.c = nil
			pendingPool.Put(p)
			return 0, nil, errClosed
		}
	}
	if done := ctx.Done(); done == nil {
		// A context that never ends (Background): one case less to wait on.
		select {
		case <-p.done:
		case <-b.quit:
			c.abandoned = true
			return 0, nil, errClosed
		}
	} else {
		select {
		case <-p.done:
		case <-done:
			c.abandoned = true
			return 0, nil, fmt.Errorf("redisstore: %w", ctx.Err())
		case <-b.quit:
			c.abandoned = true
			return 0, nil, errClosed
		}
	}
	now, seg, err := p.now, p.seg, p.err
	p.c, p.cmd, p.seg, p.err = nil, nil, nil, nil
	pendingPool.Put(p)
	return now, seg, err
}
