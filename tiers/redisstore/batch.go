package redisstore

import (
	"context"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"
)

// batcher sends the takes of concurrent callers together: each flusher
// goroutine takes the first waiting take, adds every other take already
// waiting (up to max), and sends them in ONE pipeline, the takes of each
// cluster slot (on a standalone or Sentinel-managed Redis: all of them) as
// ONE take.lua call that decides them in order, each all or nothing, as
// if each were its own call. A lone take goes out at once, as its own
// call; under load, takes that arrive while a call is in flight share the
// next one, so round trips, script invocations and (for a key several
// takes charge, such as a tenant's) SETs per decision fall as concurrency
// rises.
//
// A take with a sliding window log bucket is sent as its own take.lua
// call, in the same pipeline: take.lua writes the log's entries last, so a
// later take of a merged call could not see them. So is a take that is
// the only one of its slot in the batch.
//
// The batcher holds the client, not the Store, so that a Store dropped
// without Close can still be collected, which stops the flushers.
type batcher struct {
	client redis.UniversalClient
	keyPos int8 // where a call's keys start, for a cluster client (else 0)
	ch     chan *pending
	max    int
	wg     sync.WaitGroup
	once   sync.Once
	quit   chan struct{}
}

// pending is one call waiting in a batch (a take, a multi-slot take's
// part, or a refund), and its answer.
type pending struct {
	c     *call
	cmd   *redis.IntSliceCmd // its own call, when a take sent alone
	other redis.Cmder        // its own call, when a part or a refund
	now   int64
	seg   []int64 // the take's part of the reply
	err   error
	done  chan struct{}
}

var pendingPool = sync.Pool{New: func() any { return &pending{done: make(chan struct{}, 1)} }}

func newBatcher(client redis.UniversalClient, keyPos int8, flushers, max int) *batcher {
	b := &batcher{client: client, keyPos: keyPos, ch: make(chan *pending, flushers*max), max: max, quit: make(chan struct{})}
	b.wg.Add(flushers)
	for i := 0; i < flushers; i++ {
		go b.loop()
	}
	return b
}

// stop tells the flushers to send what is queued and end.
func (b *batcher) stop() { b.once.Do(func() { close(b.quit) }) }

// close stops the flushers and waits for them.
func (b *batcher) close() {
	b.stop()
	b.wg.Wait()
}

// sentBeforeClose waits, once Close has begun, for the flushers to send
// what was queued and stop, and reports whether p was among what they
// sent: its answer then stands (a take Close sent may have charged, so
// it must not be reported as failed). A take still queued after they
// stopped was never sent.
func (b *batcher) sentBeforeClose(p *pending) bool {
	b.wg.Wait()
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (b *batcher) loop() {
	defer b.wg.Done()
	f := newFlusher(b.client, b.keyPos, b.max)
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
	client redis.UniversalClient
	keyPos int8
	batch  []*pending
	merged []*pending // the takes of the merged calls, by group
	alone  []*pending // the takes sent as their own call
	groups []group    // the merged calls: runs of merged, one slot each
	calls  []*call    // the merged calls' own arguments, one per group
}

// group is one merged call: the takes merged[start:end], all of one slot.
type group struct {
	start, end int
	cmd        *redis.IntSliceCmd
}

func newFlusher(client redis.UniversalClient, keyPos int8, max int) *flusher {
	return &flusher{client: client, keyPos: keyPos, batch: make([]*pending, 0, max)}
}

// newCmd returns the command of a script call laid out in args, routed by
// its first key on a cluster.
func (f *flusher) newCmd(ctx context.Context, args []any) *redis.IntSliceCmd {
	cmd := redis.NewIntSliceCmd(ctx, args...)
	if f.keyPos != 0 {
		cmd.SetFirstKeyPos(f.keyPos)
	}
	return cmd
}

// flush sends the batch. A lone take is its own call, outside any
// pipeline, exactly as an unbatched take goes. Otherwise it sends one
// pipeline (a cluster client splits it by node): the takes without a
// sliding window log that share a slot with another as one merged call per
// slot, the others as their own calls. A call answered NOSCRIPT (the
// script cache was emptied) did not run, so it is sent again by EVAL,
// which also reloads the script; a call Redis refused is sent again after
// a backoff (see refused). Any other error of a merged call is every one
// of its takes' error, and it is never sent again (see once): an error
// reply charged none of them (take.lua decides everything before its
// first write, and Redis refuses a script's write only at the first); a
// lost reply may have charged them all.
func (f *flusher) flush() {
	ctx := context.Background()
	if len(f.batch) == 1 {
		p := f.batch[0]
		f.merged, f.alone, f.groups = f.merged[:0], append(f.alone[:0], p), f.groups[:0]
		if p.c.kind != kindTake {
			f.runOwn(ctx, p)
			p.done <- struct{}{}
			return
		}
		cmd, err := runScript(ctx, f.client, p.c, takeScript, f.keyPos, redis.NewIntSliceCmd)
		if err != nil {
			p.err = fmt.Errorf("redisstore: %w", err)
		} else {
			p.now, p.seg, p.err = splitNow(cmd.Val())
		}
		p.done <- struct{}{}
		return
	}
	f.group()
	pipe := f.client.Pipeline()
	for g := range f.groups {
		gr := &f.groups[g]
		m := f.buildMerged(g)
		gr.cmd = f.newCmd(ctx, m.args)
		_ = pipe.Process(ctx, onceIntSlice{gr.cmd})
	}
	for _, p := range f.alone {
		if p.c.kind != kindTake {
			p.other = f.ownCmd(ctx, p)
			_ = pipe.Process(ctx, noRetry(p.other))
			continue
		}
		p.cmd = f.newCmd(ctx, p.c.args)
		_ = pipe.Process(ctx, onceIntSlice{p.cmd})
	}
	_, _ = pipe.Exec(ctx)

	// Calls answered NOSCRIPT go again by EVAL at once; calls Redis
	// refused (see refused) go again after a backoff, up to maxRefused
	// times; any other failure is final (see once).
	for attempt := 1; ; attempt++ {
		var retry redis.Pipeliner
		wait := false
		// resend reports whether a call that failed with err goes again,
		// by EVAL of sc's source on NOSCRIPT.
		resend := func(err error, args []any, sc script) bool {
			noScript := isNoScript(err)
			if !noScript && !(refused(err) && attempt <= maxRefused) {
				return false
			}
			if noScript {
				args[0], args[1] = "eval", sc.srcArg
			} else {
				wait = true
			}
			if retry == nil {
				retry = f.client.Pipeline()
			}
			return true
		}
		again := func(cmd *redis.IntSliceCmd, args []any) *redis.IntSliceCmd {
			if !resend(cmd.Err(), args, takeScript) {
				return cmd
			}
			cmd = f.newCmd(ctx, args)
			_ = retry.Process(ctx, onceIntSlice{cmd})
			return cmd
		}
		for g := range f.groups {
			gr := &f.groups[g]
			gr.cmd = again(gr.cmd, f.calls[g].args)
		}
		for _, p := range f.alone {
			if p.c.kind == kindTake {
				p.cmd = again(p.cmd, p.c.args)
			} else if resend(p.other.Err(), p.c.args, p.c.script()) {
				p.other = f.ownCmd(ctx, p)
				_ = retry.Process(ctx, noRetry(p.other))
			}
		}
		if retry == nil {
			break
		}
		if wait {
			backoff(ctx, attempt)
		}
		_, _ = retry.Exec(ctx)
	}

	followed := false
	follow := func(err error) {
		if err != nil && !followed {
			followed = true
			followFailover(f.client, err)
		}
	}
	for g := range f.groups {
		gr := &f.groups[g]
		follow(gr.cmd.Err())
		split(gr.cmd, f.merged[gr.start:gr.end])
		gr.cmd = nil
		f.calls[g].reset()
	}
	for _, p := range f.alone {
		if p.c.kind != kindTake {
			follow(p.other.Err())
			p.now, p.seg, p.err = ownResult(p)
			continue
		}
		follow(p.cmd.Err())
		p.now, p.seg, p.err = splitOne(p.cmd)
	}
	for _, p := range f.batch {
		p.done <- struct{}{}
	}
}

// group sorts the batch into merged calls and calls of their own: the
// takes with a sliding window log, the parts of multi-slot takes and the
// refunds go alone; the others are ordered by slot
// (stably, so each slot's takes keep the order they queued in; on a
// standalone Redis every take has slot 0) and each slot's run becomes one
// merged call, unless it is a single take, which goes alone.
func (f *flusher) group() {
	f.merged, f.alone, f.groups = f.merged[:0], f.alone[:0], f.groups[:0]
	for _, p := range f.batch {
		if p.c.log || p.c.kind != kindTake {
			f.alone = append(f.alone, p)
			continue
		}
		// insertion: batches are short, and usually of one slot
		f.merged = append(f.merged, p)
		k := len(f.merged) - 1
		for k > 0 && f.merged[k-1].c.slot > p.c.slot {
			f.merged[k] = f.merged[k-1]
			k--
		}
		f.merged[k] = p
	}
	// Compact the runs of two or more into groups, in place.
	w := 0
	for i := 0; i < len(f.merged); {
		j := i + 1
		for j < len(f.merged) && f.merged[j].c.slot == f.merged[i].c.slot {
			j++
		}
		if j-i == 1 {
			f.alone = append(f.alone, f.merged[i])
		} else {
			f.groups = append(f.groups, group{start: w, end: w + j - i})
			w += copy(f.merged[w:], f.merged[i:j])
		}
		i = j
	}
	clear(f.merged[w:])
	f.merged = f.merged[:w]
	for len(f.calls) < len(f.groups) {
		f.calls = append(f.calls, new(call))
	}
}

// splitOne returns the time and the take's part of a one-take reply.
func splitOne(cmd *redis.IntSliceCmd) (int64, []int64, error) {
	vals, err := cmd.Result()
	if err != nil {
		return 0, nil, fmt.Errorf("redisstore: %w", err)
	}
	return splitNow(vals)
}

// split hands each take of a merged call its part of the reply.
func split(cmd *redis.IntSliceCmd, takes []*pending) {
	vals, err := cmd.Result()
	if err == nil && len(vals) == 0 {
		err = fmt.Errorf("take.lua replied nothing")
	}
	if err == nil {
		now, o := vals[0], 1
		for _, p := range takes {
			if o >= len(vals) {
				err = fmt.Errorf("take.lua replied %d values for %d takes", len(vals), len(takes))
				break
			}
			l, _ := takeLen(vals[o], p.c.n, false)
			if o+l > len(vals) {
				err = fmt.Errorf("take.lua replied %d values for %d takes", len(vals), len(takes))
				break
			}
			p.now, p.seg = now, vals[o:o+l:o+l]
			o += l
		}
		if err == nil && o != len(vals) {
			err = fmt.Errorf("take.lua replied %d values for %d takes, want %d", len(vals), len(takes), o)
		}
	}
	if err != nil {
		for _, p := range takes {
			p.seg, p.err = nil, fmt.Errorf("redisstore: %w", err)
		}
	}
}

// buildMerged lays out, in f.calls[g].args, one take.lua call of the takes
// of group g:
//
//	EVALSHA sha numkeys key... now "t" minttl T limits...
//
// The keys and each take's limits are the takes' own argument buffers; the
// call holds the counts and the time (the latest of the takes' times, when
// the store has a clock: each take is decided no earlier than it was asked
// for). On a cluster its first key is the first take's, as a string, by
// which the client routes it: every take of the group has its keys in that
// slot.
func (f *flusher) buildMerged(g int) *call {
	m := f.calls[g]
	takes := f.merged[f.groups[g].start:f.groups[g].end]
	keys, fixed, now := 0, false, int64(0)
	for _, p := range takes {
		keys += p.c.n
		if p.c.fixed && (!fixed || p.c.now > now) {
			fixed, now = true, p.c.now
		}
	}
	m.putInt(int64(keys))
	m.putInt(int64(len(takes)))
	if fixed {
		m.putInt(now)
	}
	m.finish()
	m.args = append(m.args, "evalsha", takeScript.shaArg, &m.bufs[0])
	for _, p := range takes {
		for k := 1; k <= p.c.n; k++ {
			m.args = append(m.args, &p.c.bufs[k])
		}
	}
	if f.keyPos != 0 {
		m.args[keysAt] = takes[0].c.args[keysAt]
	}
	if fixed {
		m.args = append(m.args, &m.bufs[2])
	} else {
		m.args = append(m.args, "")
	}
	// minttl is the same for every take of a store: the first take's.
	m.args = append(m.args, modeTake, &takes[0].c.bufs[takes[0].c.lim-1], &m.bufs[1])
	for _, p := range takes {
		m.args = append(m.args, &p.c.bufs[p.c.lim])
	}
	return m
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
			if !b.sentBeforeClose(p) {
				c.abandoned = true
				return 0, nil, errClosed
			}
		}
	} else {
		select {
		case <-p.done:
		case <-done:
			c.abandoned = true
			return 0, nil, fmt.Errorf("redisstore: %w", ctx.Err())
		case <-b.quit:
			if !b.sentBeforeClose(p) {
				c.abandoned = true
				return 0, nil, errClosed
			}
		}
	}
	now, seg, err := p.now, p.seg, p.err
	p.c, p.cmd, p.seg, p.err = nil, nil, nil, nil
	pendingPool.Put(p)
	return now, seg, err
}
