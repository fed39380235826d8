package redisstore

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// This file is the batcher's side of multi-slot cluster takes: their
// parts (take.lua mode "p", one per slot) and their refunds (refund.lua)
// are queued with the takes of every other caller and sent in the
// flushers' pipelines, as calls of their own (a cluster client splits a
// pipeline by node, so a flush costs one round trip per node however many
// takes, parts and refunds it carries).

// takeHead starts take.lua as a script of its own: its keys are its
// declared keys (KEYS).
const takeHead = "local NODE = false\n"

// nodeHead starts take.lua as nodeScript, the script of a merged call of
// takes in several slots of one cluster node: its one declared key routes
// the call; ARGV[1] is the number of keys, ARGV[2..] the keys, and the
// rest are take.lua's arguments. Redis refuses a script's declared keys
// in several slots, and a single command over several (MGET), so the
// states are read by one MGET per take (each take's keys share a slot):
// node_read. The flag allow-cross-slot-keys (Redis 7) lets the script
// reach keys in other slots of its node; a key of another node fails the
// call at its first read, before anything was written.
const nodeHead = `local NODE = true
local NK = tonumber(ARGV[1])
local KEYS, ARGV = {unpack(ARGV, 2, NK + 1)}, {unpack(ARGV, NK + 2)}
local function node_read(K, T)
  local vals, i = {}, 0
  for j = 1, T do
    local m = struct.unpack('<d', ARGV[4 + j])
    local r = redis.call('MGET', unpack(K, i + 1, i + m))
    for q = 1, m do vals[i + q] = r[q] end
    i = i + m
  end
  return vals
end
`

// newNodeScript returns take (take.lua, after log.lua) as nodeScript
// (see nodeHead).
func newNodeScript(take string) script {
	return crossSlot(newScript(nodeHead, take))
}

// crossSlot returns s flagged allow-cross-slot-keys (Redis 7): run on a
// cluster node, it may reach keys of every slot the node serves, not only
// its declared keys' slot.
func crossSlot(s script) script {
	s.src = "#!lua flags=allow-cross-slot-keys\n" + s.src
	h := sha1.Sum([]byte(s.src))
	s.sha = hex.EncodeToString(h[:])
	s.srcArg, s.shaArg = s.src, s.sha
	return s
}

// script returns the script c runs.
func (c *call) script() script {
	switch c.kind {
	case kindRefund:
		return refundScript
	case kindSettle:
		return settleScript
	case kindReport:
		return reportScript
	case kindReportNode:
		return reportNodeScript
	}
	return takeScript
}

// ownCmd returns the command of p's part, refund or settlement, sent as
// its own call: its reply is integers (mode "p") or one integer
// (refund.lua, settle.lua).
func (f *flusher) ownCmd(ctx context.Context, p *pending) redis.Cmder {
	var cmd redis.Cmder
	if p.c.kind.oneInt() {
		cmd = redis.NewIntCmd(ctx, p.c.args...)
	} else {
		cmd = redis.NewIntSliceCmd(ctx, p.c.args...)
	}
	if f.keyPos != 0 {
		cmd.SetFirstKeyPos(f.keyPos)
	}
	return cmd
}

// runOwn sends p's part, refund or settlement alone, outside any
// pipeline, and writes its answer to p.
func (f *flusher) runOwn(ctx context.Context, p *pending) {
	var err error
	if p.c.kind.oneInt() {
		p.other, err = runScript(ctx, f.client, p.c, p.c.script(), f.keyPos, redis.NewIntCmd)
	} else {
		p.other, err = runScript(ctx, f.client, p.c, takeScript, f.keyPos, redis.NewIntSliceCmd)
	}
	_ = err // in p.other
	p.now, p.seg, p.err = ownResult(p)
}

// ownResult returns the answer of p's part (the time and the integers of
// its mode "p" reply; the states go to p.c.st) or refund (its reply as
// the time, no integers).
func ownResult(p *pending) (int64, []int64, error) {
	switch cmd := p.other.(type) {
	case *redis.IntCmd:
		v, err := cmd.Result()
		if err != nil {
			return 0, nil, fmt.Errorf("redisstore: %w", err)
		}
		return v, nil, nil
	case *redis.IntSliceCmd:
		vals, err := cmd.Result()
		if err != nil {
			return 0, nil, fmt.Errorf("redisstore: %w", err)
		}
		return parsePre(vals, p.c, p.c.n)
	}
	return 0, nil, fmt.Errorf("redisstore: internal error: reply of type %T", p.other)
}

// answer is the answer of one call sent by doAll: the time its script
// used (a refund's reply), and a take's part of the reply.
type answer struct {
	now int64
	seg []int64
	err error
}

// doAll queues every call of cs at once, so that they can share the
// flushers' pipelines, and waits for their answers, written to out (as
// long as cs). If ctx ends, or Close stops the flushers, first, the calls
// not yet answered get that error and are marked abandoned (the flusher
// still owns them; they may still run in Redis); when ctx ended, those
// queued keep in sent the pending their answer will come to. Unlike do,
// it is also the path of multi-slot parts and refunds.
func (b *batcher) doAll(ctx context.Context, cs []*call, out []answer) {
	var inline [inlineSlots]*pending
	ps := inline[:0]
	// fail gives the calls from k on err; those queued are abandoned,
	// and, when they will still be sent (ctx ended, not Close), keep
	// their pending in sent, where their answer can still be waited for
	// (see answerLateMulti).
	fail := func(k int, err error, sent bool) {
		for ; k < len(cs); k++ {
			out[k].err = err
			if k < len(ps) {
				cs[k].abandoned = true
				if sent {
					cs[k].sent = ps[k]
				}
			}
		}
	}
	var err error
	for _, c := range cs {
		p := pendingPool.Get().(*pending)
		p.c = c
		select {
		case b.ch <- p:
			ps = append(ps, p)
			continue
		case <-ctx.Done():
			err = fmt.Errorf("redisstore: %w", ctx.Err())
		case <-b.quit:
			err = errClosed
		}
		p.c = nil
		pendingPool.Put(p)
		break
	}
	if err != nil {
		// The calls not queued never went; those queued may have run,
		// so their answers are still waited for.
		for k := len(ps); k < len(cs); k++ {
			out[k].err = err
		}
	}
	done := ctx.Done()
	for k, p := range ps {
		select {
		case <-p.done:
		default:
			select {
			case <-p.done:
			case <-done:
				fail(k, fmt.Errorf("redisstore: %w", ctx.Err()), true)
				return
			case <-b.quit:
				if !b.sentBeforeClose(p) {
					fail(k, errClosed, false)
					return
				}
			}
		}
		out[k] = answer{now: p.now, seg: p.seg, err: p.err}
		p.c, p.cmd, p.other, p.seg, p.err = nil, nil, nil, nil, nil
		pendingPool.Put(p)
	}
}
