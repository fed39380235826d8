package redisstore

import (
	"context"
	"fmt"
	"runtime"

	"github.com/floodgate-go/floodgate/internal/lateanswer"
	"github.com/floodgate-go/floodgate/quota"
)

// AnswersLate reports whether the store hands the answer to every take it
// abandons after sending to the receiver of late answers in the take's
// context (package fallback puts one there): with batching on (the
// default), a take whose caller's context ends is already queued to a
// flusher, which sends it and reads its answer whatever the caller does,
// so the answer is handed to that receiver, if the context has one. On a
// Cluster, a take spanning several slots is finished as a whole in the
// background (its parts' answers, then a refund of the charging slots if
// one denied), and that outcome is what is handed on. A store with
// batching off reports false.
func (s *Store) AnswersLate() bool { return s.batch != nil }

// answerLate hands the answer of a batched take whose caller stopped
// waiting after queueing it (p) to the lateanswer.Receiver in the take's
// context, if it has one: Late is called now, before Take returns, and
// what it returned once the flusher has the answer. Nothing is done
// unless a caller asked for it, and only here, on the abandoned path.
func (s *Store) answerLate(ctx context.Context, p *pending, buckets []quota.Bucket, idx []int) {
	la, _ := ctx.Value(lateanswer.Key).(lateanswer.Receiver)
	if la == nil || s.batch == nil {
		return
	}
	n := len(buckets)
	if idx != nil {
		n = len(idx)
	}
	// The take's own buckets, in reply order: the caller's slices are
	// its own again once Take returns.
	bs := make([]quota.Bucket, n)
	for j := range bs {
		if idx != nil {
			bs[j] = buckets[idx[j]]
		} else {
			bs[j] = buckets[j]
		}
	}
	deliver := la.Late(bs)
	if deliver == nil {
		return
	}
	b := s.batch
	go func() {
		select {
		case <-p.done:
		case <-b.quit:
			if !b.sentBeforeClose(p) {
				deliver(false, nil, errClosed)
				return
			}
		}
		if p.err != nil {
			deliver(false, nil, p.err)
			return
		}
		res := make([]quota.Result, n)
		allowed, err := decodeTake(p.seg, n, bs, nil, res, false, nil)
		if err != nil {
			res = nil
		}
		deliver(allowed, res, err)
	}()
	// s must not be collected (which stops the batcher) before the
	// goroutine holds the batcher.
	runtime.KeepAlive(s)
}

// answerLateMulti finishes in the background a batched multi-slot take
// whose caller's context ended after its parts were queued, some still
// unanswered (their calls keep their pending in sent), and returns the
// context's error for Take to return. It waits for every part's answer,
// then settles the take as takeMulti does: allowed when every slot
// charged, else what the charging slots charged is given back. So a take
// abandoned half-way is all-or-nothing like any other, instead of leaving
// the charge of a slot that allowed in place after another denied. The
// outcome goes to the lateanswer.Receiver in ctx, if any, whose Late is
// called before this returns. It takes the groups' calls over (their
// entries in groups become nil) and copies what it keeps of buckets and
// out, which are the caller's again once Take returns.
func (s *Store) answerLateMulti(ctx context.Context, groups []slotGroup, buckets []quota.Bucket, out []answer) error {
	err := fmt.Errorf("redisstore: %w", ctx.Err())
	bs := append([]quota.Bucket(nil), buckets...)
	gs := make([]slotGroup, len(groups))
	for k := range groups {
		gs[k] = groups[k]
		gs[k].idx = append([]int(nil), groups[k].idx...)
		groups[k].c = nil
	}
	outs := append([]answer(nil), out...)
	var deliver func(bool, []quota.Result, error)
	if la, _ := ctx.Value(lateanswer.Key).(lateanswer.Receiver); la != nil {
		deliver = la.Late(append([]quota.Bucket(nil), buckets...))
	}
	b := s.batch
	go func() {
		for k := range gs {
			p := gs[k].c.sent
			if p == nil {
				continue
			}
			select {
			case <-p.done:
			case <-b.quit:
				if !b.sentBeforeClose(p) {
					outs[k] = answer{err: errClosed}
					continue
				}
			}
			outs[k] = answer{now: p.now, seg: p.seg, err: p.err}
		}
		res := make([]quota.Result, len(bs))
		decodeParts(gs, outs, bs, res)
		allowed, err := s.settleParts(context.Background(), gs, bs, res)
		for k := range gs {
			s.release(gs[k].c)
		}
		if deliver == nil {
			return
		}
		if err != nil {
			res = nil
		}
		deliver(allowed, res, err)
	}()
	return err
}
