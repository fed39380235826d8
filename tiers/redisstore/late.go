package redisstore

import (
	"context"
	"runtime"

	"github.com/floodgate-go/floodgate/quota"
)

// AnswersLate reports whether the store calls quota.LateAnswers.Late for
// every take it abandons after sending: with batching on (the default), a
// take whose caller's context ends is already queued to a flusher, which
// sends it and reads its answer whatever the caller does, so the answer is
// handed to the LateAnswers in the take's context, if it has one. On a
// Cluster a take spanning several slots is decided by one part per slot
// (and refunds), whose combined answer is not handed on when its caller
// gives up, so a Cluster store reports false; so does a store with
// batching off.
func (s *Store) AnswersLate() bool { return s.batch != nil && s.cluster == nil }

// answerLate hands the answer of a batched take whose caller stopped
// waiting after queueing it (p) to the quota.LateAnswers in the take's
// context, if it has one: Late is called now, before Take returns, and
// what it returned once the flusher has the answer. Nothing is done
// unless a caller asked for it, and only here, on the abandoned path.
func (s *Store) answerLate(ctx context.Context, p *pending, buckets []quota.Bucket, idx []int) {
	la, _ := ctx.Value(quota.LateAnswersKey).(quota.LateAnswers)
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
