package redisstore

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/internal/failover"
	"github.com/floodgate-go/floodgate/quota"
)

// Bounds of the background retry of failed refunds (see retrier).
const (
	// maxRefundWindow caps how long a failed refund is retried, for a
	// bucket whose charged units would take longer than that to come back.
	maxRefundWindow = time.Hour
	// maxRefundJobs caps the refunds being retried at once; a refund that
	// fails while that many wait is dropped (its units stay charged until
	// they come back by themselves).
	maxRefundJobs = 10_000
	// refundRetryFirst is the wait before the first retry, doubling up to
	// refundRetryMax.
	refundRetryFirst = 20 * time.Millisecond
	refundRetryMax   = 2 * time.Second
)

// refundJob is the refund of one slot group of a denied multi-slot take,
// as the retrier keeps it.
type refundJob struct {
	group    int    // the slot group's index in its take
	first    int    // the index of the group's first bucket
	marker   string // the refund's marker key ("" when none can be built)
	ttl      int64  // the marker's TTL in ms
	deadline time.Time
	c        *call // the refund.lua call, owned by the job (retrier)
	next     time.Time
	attempt  int
}

// newRefundJob returns the refund job of slot group g, which charged: its
// marker key (next to the group's first key, in its slot) and its
// deadline, when every unit it charged would have come back by itself (the
// latest reset after the charge, in res), at most maxRefundWindow away.
func (s *Store) newRefundJob(buckets []quota.Bucket, g *slotGroup, res []quota.Result) refundJob {
	var back time.Duration
	for _, i := range g.idx {
		back = max(back, res[i].Reset)
	}
	back = min(back, maxRefundWindow)
	first := g.idx[0]
	j := refundJob{first: first, deadline: time.Now().Add(back), ttl: (back + time.Second).Milliseconds()}
	j.marker = markerKey(s.prefix+buckets[first].Key, s.refundToken())
	return j
}

// build lays out the job's refund.lua call in c.
func (j *refundJob) build(c *call, s *Store, buckets []quota.Bucket, g *slotGroup) {
	c.buildRefund(refundScript, s.prefix, buckets, g.idx, g.c.st, g.now, s.cluster != nil, j.marker, j.ttl)
}

// refundToken returns a token no other refund of any store is likely to
// share: the store's random base and a counter.
func (s *Store) refundToken() string {
	b := make([]byte, 0, 40)
	b = strconv.AppendUint(b, s.refundBase, 36)
	b = append(b, '.')
	b = strconv.AppendUint(b, s.refundSeq.Add(1), 36)
	return string(b)
}

// newRefundBase returns a store's random token base.
func newRefundBase() uint64 { return rand.Uint64() }

// markerKey returns the key of a refund's marker in the slot of full (a
// bucket's full key), or "" when there is none: with a hash tag, the key
// plus a suffix keeps it; without one, the key wrapped in braces makes it
// the tag, unless it holds a brace itself.
func markerKey(full, token string) string {
	const suffix = ":fg-refund:"
	if t := hashTag(full); len(t) != len(full) {
		return full + suffix + token
	}
	if full == "" || strings.ContainsAny(full, "{}") {
		return ""
	}
	return "{" + full + "}" + suffix + token
}

// retrier sends failed refunds again in the background, in one pipeline
// per round (a cluster client splits it by node), each after a backoff
// that doubles from refundRetryFirst up to refundRetryMax, until it
// applies (refund.lua's marker makes a refund that already ran, whose
// reply was lost, change nothing the second time) or its deadline passes:
// the time when the units it gives back would have come back by
// themselves, at most maxRefundWindow after the charge. So no unit stays
// charged by a failed refund longer than it would have without the
// refund, and at most an hour. Its goroutine runs only while refunds wait.
// Close drops the refunds still waiting.
type retrier struct {
	client redis.UniversalClient
	keyPos int8

	mu      sync.Mutex
	jobs    []refundJob
	running bool
	closed  bool
	quit    chan struct{}

	// What happened to the refunds handed over: applied by a retry,
	// given up at their deadline, dropped (the queue full, or Close).
	applied, expired, dropped atomic.Int64
}

func newRetrier(client redis.UniversalClient, keyPos int8) *retrier {
	return &retrier{client: client, keyPos: keyPos, quit: make(chan struct{})}
}

// add hands j over, to be sent again after the first backoff.
func (r *retrier) add(j refundJob) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || len(r.jobs) >= maxRefundJobs {
		r.dropped.Add(1)
		return
	}
	j.attempt, j.next = 1, time.Now().Add(refundRetryFirst)
	r.jobs = append(r.jobs, j)
	if !r.running {
		r.running = true
		go r.loop()
	}
}

// close stops the retries; what still waits is dropped.
func (r *retrier) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	r.closed = true
	close(r.quit)
	r.dropped.Add(int64(len(r.jobs)))
	r.jobs = nil
}

// loop sends the due refunds until none waits.
func (r *retrier) loop() {
	t := time.NewTimer(refundRetryFirst)
	defer t.Stop()
	for {
		r.mu.Lock()
		if r.closed || len(r.jobs) == 0 {
			r.running = false
			r.mu.Unlock()
			return
		}
		now := time.Now()
		next := now.Add(refundRetryMax)
		var due []refundJob
		keep := r.jobs[:0]
		for _, j := range r.jobs {
			switch {
			case !now.Before(j.deadline):
				r.expired.Add(1)
			case !now.Before(j.next):
				due = append(due, j)
			default:
				keep = append(keep, j)
				if j.next.Before(next) {
					next = j.next
				}
			}
		}
		clear(r.jobs[len(keep):])
		r.jobs = keep
		r.mu.Unlock()

		if len(due) > 0 {
			again := r.send(due)
			r.mu.Lock()
			r.jobs = append(r.jobs, again...)
			r.mu.Unlock()
			continue
		}
		t.Reset(time.Until(next))
		select {
		case <-t.C:
		case <-r.quit:
		}
	}
}

// send sends the refunds of due in one pipeline and returns those to send
// again, with their next attempt set.
func (r *retrier) send(due []refundJob) []refundJob {
	ctx, cancel := context.WithTimeout(context.Background(), undoTimeout)
	defer cancel()
	pipe := r.client.Pipeline()
	cmds := make([]*redis.IntCmd, len(due))
	for k := range due {
		cmd := redis.NewIntCmd(ctx, due[k].c.args...)
		if r.keyPos != 0 {
			cmd.SetFirstKeyPos(r.keyPos)
		}
		cmds[k] = cmd
		_ = pipe.Process(ctx, onceInt{cmd})
	}
	_, _ = pipe.Exec(ctx)
	var again []refundJob
	followed := false
	for k, cmd := range cmds {
		j := due[k]
		err := cmd.Err()
		if err == nil {
			r.applied.Add(1)
			continue
		}
		if isNoScript(err) {
			j.c.args[0], j.c.args[1] = "eval", refundScript.srcArg
			j.next = time.Now()
		} else {
			if !followed {
				followed = true
				failover.Follow(r.client, err)
			}
			wait := min(refundRetryFirst<<j.attempt, refundRetryMax)
			j.attempt++
			j.next = time.Now().Add(wait)
		}
		again = append(again, j)
	}
	return again
}
