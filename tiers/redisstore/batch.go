package redisstore

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/internal/failover"
)

// batcher sends the takes of concurrent callers together: each flusher
// goroutine takes the first waiting take, adds every other take already
// waiting (up to max), and sends them in ONE pipeline (which a cluster
// client splits by master), the takes of each cluster master (on a
// standalone or Sentinel-managed Redis: all of them) as ONE take.lua call
// that decides them in order, each all or nothing, as if each were its
// own call. The parts of multi-slot cluster takes (mode "p") are merged
// likewise, apart; their refunds go as calls of their own. A lone take goes out at once, as its own
// call; under load, takes that arrive while a call is in flight share the
// next one, so round trips, script invocations and (for a key several
// takes charge, such as a tenant's) SETs per decision fall as concurrency
// rises.
//
// A take with a sliding window log bucket is sent as its own take.lua
// call, in the same pipeline: take.lua writes the log's entries last, so a
// later take of a merged call could not see them. So is a take that is
// the only one of its master in the batch.
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
	gk    int     // the flusher's grouping key: slot, or node, and kind
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
	client  redis.UniversalClient
	cluster *redis.ClusterClient // when client is one: merged calls go per node
	keyPos  int8
	batch   []*pending
	merged  []*pending // the takes of the merged calls, by group
	alone   []*pending // the takes sent as their own call
	groups  []group    // the merged calls: runs of merged, one slot or node each
	calls   []*call    // the merged calls' own arguments, one per group
	// nodes numbers the cluster's masters as this flusher met them;
	// noNode is set once Redis could not run nodeScript (older than 7),
	// and merged calls are then of one slot each.
	nodes  map[*redis.Client]int
	noNode bool
}

// group is one merged call: the takes merged[start:end], all of one slot,
// or (node) of several slots of one cluster node, all takes or all parts
// of multi-slot takes (pre).
type group struct {
	start, end int
	node, pre  bool
	cmd        *redis.IntSliceCmd // takes, or parts (mode "p")
	split      bool               // sent again as calls of their own (see flush)
}

// err returns the error of the group's call.
func (g *group) err() error { return g.cmd.Err() }

func newFlusher(client redis.UniversalClient, keyPos int8, max int) *flusher {
	f := &flusher{client: client, keyPos: keyPos, batch: make([]*pending, 0, max)}
	if cc, ok := client.(*redis.ClusterClient); ok {
		f.cluster, f.nodes = cc, map[*redis.Client]int{}
	}
	return f
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

// groupCmd returns the command of group g's merged call.
func (f *flusher) groupCmd(ctx context.Context, g int) redis.Cmder {
	gr := &f.groups[g]
	gr.cmd = f.newCmd(ctx, f.calls[g].args)
	return onceIntSlice{gr.cmd}
}

// flush sends the batch. A lone take is its own call, outside any
// pipeline, exactly as an unbatched take goes. Otherwise it sends one
// pipeline (a cluster client splits it by node, so this is one round trip
// per node): the takes without a sliding window log that share a slot (on
// a cluster: a node) with another as one merged call per slot (node), the
// parts of multi-slot takes likewise but apart from the takes (their calls
// run take.lua in mode "p"), the others as their own calls. A merged call
// of several slots of one node runs nodeScript, take.lua allowed to reach
// every key of its node; if Redis answers that a key is not on the node
// (a slot moved since the client last loaded the slot map; nothing ran),
// its takes go again as calls of their own, which follow the move. A call
// answered NOSCRIPT (the script cache was emptied) did not run, so it is
// sent again by EVAL, which also reloads the script; a call Redis refused
// is sent again after a backoff (see refused). Any other error of a merged
// call is every one of its takes' error, and it is never sent again (see
// once): an error reply charged none of them (take.lua decides everything
// before its first write, and Redis refuses a script's write only at the
// first); a lost reply may have charged them all.
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
		f.buildMerged(g)
		_ = pipe.Process(ctx, f.groupCmd(ctx, g))
	}
	for _, p := range f.alone {
		f.processOwn(ctx, pipe, p)
	}
	_, _ = pipe.Exec(ctx)
	f.resend(ctx)

	followed := false
	follow := func(err error) {
		if err != nil && !followed {
			followed = true
			failover.Follow(f.client, err)
		}
	}
	for g := range f.groups {
		gr := &f.groups[g]
		if !gr.split {
			follow(gr.err())
			if gr.pre {
				splitPre(gr.cmd, f.merged[gr.start:gr.end])
			} else {
				split(gr.cmd, f.merged[gr.start:gr.end])
			}
		}
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

// processOwn adds p's own call to pipe.
func (f *flusher) processOwn(ctx context.Context, pipe redis.Pipeliner, p *pending) {
	if p.c.kind != kindTake {
		p.other = f.ownCmd(ctx, p)
		_ = pipe.Process(ctx, noRetry(p.other))
		return
	}
	p.cmd = f.newCmd(ctx, p.c.args)
	_ = pipe.Process(ctx, onceIntSlice{p.cmd})
}

// resend sends again, in one pipeline per attempt, the calls answered
// NOSCRIPT (by EVAL, at once) or refused (see refused; after a backoff, up
// to maxRefused times), and the takes of a node's merged call that named
// a key not on the node (as calls of their own, at once); any other
// failure is final (see once).
func (f *flusher) resend(ctx context.Context) {
	for attempt := 1; ; attempt++ {
		var retry redis.Pipeliner
		wait := false
		// again reports whether a call that failed with err goes again,
		// by EVAL of sc's source on NOSCRIPT.
		again := func(err error, args []any, sc script) bool {
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
		for g := range f.groups {
			gr := &f.groups[g]
			if gr.split {
				continue
			}
			err := gr.err()
			if gr.node && (notLocal(err) || noNodeScript(err)) {
				// Nothing ran (no key was read): each take goes on its own,
				// to the node of its slot; the slot map is reloaded for
				// the next batches (or, where Redis cannot run nodeScript,
				// merged calls are of one slot from now on).
				gr.split = true
				if noNodeScript(err) {
					f.noNode = true
				} else {
					f.cluster.ReloadState(ctx)
				}
				if retry == nil {
					retry = f.client.Pipeline()
				}
				for _, p := range f.merged[gr.start:gr.end] {
					f.alone = append(f.alone, p)
					f.processOwn(ctx, retry, p)
				}
				continue
			}
			sc := takeScript
			if gr.node {
				sc = nodeScript
			}
			if again(err, f.calls[g].args, sc) {
				_ = retry.Process(ctx, f.groupCmd(ctx, g))
			}
		}
		for _, p := range f.alone {
			var err error
			if p.c.kind == kindTake {
				err = p.cmd.Err()
			} else {
				err = p.other.Err()
			}
			if again(err, p.c.args, p.c.script()) {
				f.processOwn(ctx, retry, p)
			}
		}
		if retry == nil {
			return
		}
		if wait {
			backoff(ctx, attempt)
		}
		_, _ = retry.Exec(ctx)
	}
}

// notLocal reports whether err is Redis refusing a script's access to a
// key its node does not serve (nodeScript, after a slot moved).
func notLocal(err error) bool {
	return err != nil && strings.Contains(err.Error(), "non local key")
}

// noNodeScript reports whether err is Redis failing to compile nodeScript:
// before 7.0 it knows no script flags (its "#!" line).
func noNodeScript(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "compiling script") || strings.Contains(err.Error(), "shebang"))
}

// maxNodeKeys bounds the keys of one merged call of several slots: they
// are unpacked from its arguments, within Lua's stack.
const maxNodeKeys = 1000

// group sorts the batch into merged calls and calls of their own: the
// takes with a sliding window log go alone; the others (takes, and
// separately parts of multi-slot takes) are ordered by slot, on a cluster
// by node (stably, so each slot's takes keep the order they queued in; on
// a standalone Redis every take has slot 0), and each run becomes one
// merged call, unless it is a single take, which goes alone.
func (f *flusher) group() {
	f.merged, f.alone, f.groups = f.merged[:0], f.alone[:0], f.groups[:0]
	for _, p := range f.batch {
		if p.c.log || p.c.kind.oneInt() {
			f.alone = append(f.alone, p)
			continue
		}
		p.gk = 2 * p.c.slot
		if f.cluster != nil && !f.noNode {
			n, ok := f.nodeOf(p)
			if !ok {
				f.alone = append(f.alone, p)
				continue
			}
			p.gk = 2 * n
		}
		if p.c.kind == kindPre {
			p.gk++
		}
		// insertion: batches are short
		f.merged = append(f.merged, p)
		k := len(f.merged) - 1
		for k > 0 && f.merged[k-1].gk > p.gk {
			f.merged[k] = f.merged[k-1]
			k--
		}
		f.merged[k] = p
	}
	// Compact the runs of two or more into groups, in place.
	w := 0
	for i := 0; i < len(f.merged); {
		j, keys, node := i+1, f.merged[i].c.n, false
		for j < len(f.merged) && f.merged[j].gk == f.merged[i].gk && keys+f.merged[j].c.n <= maxNodeKeys {
			keys += f.merged[j].c.n
			node = node || f.merged[j].c.slot != f.merged[i].c.slot
			j++
		}
		if j-i == 1 {
			f.alone = append(f.alone, f.merged[i])
		} else {
			f.groups = append(f.groups, group{start: w, end: w + j - i, node: node, pre: f.merged[i].c.kind == kindPre})
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

// nodeOf returns the number of the cluster master serving p's slot, as
// the client's slot map has it.
func (f *flusher) nodeOf(p *pending) (int, bool) {
	key, ok := p.c.args[keysAt].(string)
	if !ok {
		return 0, false
	}
	m, err := f.cluster.MasterForKey(context.Background(), key)
	if err != nil {
		return 0, false
	}
	n, ok := f.nodes[m]
	if !ok {
		n = len(f.nodes)
		f.nodes[m] = n
	}
	return n, true
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

// splitPre hands each part of a merged mode "p" call its part of the
// reply: its charged flag and 6 integers per bucket, and its states (to
// its call, see call.st).
func splitPre(cmd *redis.IntSliceCmd, parts []*pending) {
	vals, err := cmd.Result()
	if err == nil && len(vals) == 0 {
		err = fmt.Errorf("take.lua replied nothing")
	}
	if err == nil {
		now, o := vals[0], 1
		for _, p := range parts {
			var seg, st []int64
			if seg, st, o, err = cutPre(vals, o, p.c.n); err != nil {
				break
			}
			p.now, p.seg, p.c.st = now, seg, st
		}
		if err == nil && o != len(vals) {
			err = fmt.Errorf("take.lua replied %d values for %d takes in mode p, want %d", len(vals), len(parts), o)
		}
	}
	if err != nil {
		for _, p := range parts {
			p.seg, p.c.st, p.err = nil, nil, fmt.Errorf("redisstore: %w", err)
		}
	}
}

// buildMerged lays out, in f.calls[g].args, one take.lua call of the takes
// of group g:
//
//	EVALSHA sha numkeys key... now mode minttl T limits...
//
// or, for a group of several slots of one node, one nodeScript call,
// which takes its keys from its arguments (a script's declared keys must
// share a slot):
//
//	EVALSHA sha 1 firstkey numkeys key... now mode minttl T limits...
//
// The keys and each take's limits are the takes' own argument buffers; the
// call holds the counts and the time (the latest of the takes' times, when
// the store has a clock: each take is decided no earlier than it was asked
// for). On a cluster its first key is the first take's, as a string, by
// which the client routes it: every take of the group has its keys in that
// slot (node).
func (f *flusher) buildMerged(g int) *call {
	m := f.calls[g]
	gr := &f.groups[g]
	takes := f.merged[gr.start:gr.end]
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
	if gr.node {
		m.args = append(m.args, "evalsha", nodeScript.shaArg, oneKey, takes[0].c.args[keysAt], &m.bufs[0])
	} else {
		m.args = append(m.args, "evalsha", takeScript.shaArg, &m.bufs[0])
	}
	for _, p := range takes {
		for k := 1; k <= p.c.n; k++ {
			m.args = append(m.args, &p.c.bufs[k])
		}
	}
	if f.keyPos != 0 && !gr.node {
		m.args[keysAt] = takes[0].c.args[keysAt]
	}
	if fixed {
		m.args = append(m.args, &m.bufs[2])
	} else {
		m.args = append(m.args, "")
	}
	mode := modeTake
	if gr.pre {
		mode = modeTakePre
	}
	// minttl is the same for every take of a store: the first take's.
	m.args = append(m.args, mode, &takes[0].c.bufs[takes[0].c.lim-1], &m.bufs[1])
	for _, p := range takes {
		m.args = append(m.args, &p.c.bufs[p.c.lim])
	}
	return m
}

// do queues c and waits for its answer: the time the script used and the
// take's part of the reply. If ctx ends first it returns ctx.Err() and
// marks c abandoned (the flusher still owns it; the take may still run in
// Redis, as with any request whose caller gave up), and, since it was
// queued, c.sent, with which its answer can still be waited for.
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
			// Queued, so it will be sent: its answer can still be
			// learnt (see answerLate).
			c.abandoned, c.sent = true, p
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
