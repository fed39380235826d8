package fallback

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Close is the hand-over before the process exits. It stops the Store's
// background work, so that it starts no further background Sync and runs
// no further call late (see Late answers in the package doc), waits,
// until ctx ends, for the background Sync and the late calls still
// running, and then hands over what is owed as Sync does: it waits for
// the late calls whose caller stopped waiting, resolves the report calls
// whose reply never came and charges the primary every unit admitted
// locally (see Sync).
//
// It returns nil when nothing is left owed. Otherwise its error names what
// was not handed over (units and keys still owed, report calls still
// unresolved, calls still running late) and why: ctx ended, the breaker
// is open (nothing is sent to a primary it holds down), or the calls'
// errors. Bound ctx (a couple of seconds at shutdown). Without a
// deadline (package otel's wrapper passes context.Background from its
// Close() error) it still ends: each report call is bounded by
// WithClosedTimeout, a call run late by the slow grace or the closed
// budget, and a late answer the primary hands over itself by the
// primary's own timeouts. Over a primary that takes no
// report calls (ChargesLocal false) nothing is owed, and Close only
// stops the background work.
//
// Close does not close the primary: the service that built the primary
// (and the Redis client beneath it) closes it, after Close returns. Over
// a localfirst Store built on this one, close the localfirst Store first:
// its last takes may still be decided here.
//
// Close is idempotent: a second call returns nil at once, as
// localfirst's Close does. A Store is not meant to be used after Close,
// but it stays safe to: Take keeps deciding, through the primary under
// the breaker, or locally when the primary cannot answer, so a request
// still in flight at shutdown is answered; nothing runs in the background
// any more, so units admitted locally after Close stay owed until Sync is
// called by hand (Sync works as before, and hands over what a Close
// that ran out of time left behind).
func (s *Store) Close(ctx context.Context) error {
	if s.shut.Swap(true) {
		return nil
	}
	// kick and callPrimary check shut after claiming their work (running,
	// lateN), so once shut is set and both read idle, nothing starts.
	for (s.ch.running.Load() || s.lateN.Load() > 0) && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	var err error
	if ctx.Err() == nil {
		err = s.Sync(ctx)
	}
	left := s.leftOver()
	if left == "" {
		return nil
	}
	var why []error
	if e := ctx.Err(); e != nil {
		why = append(why, e)
	}
	if !s.closed.Load() && !s.halfOpen.Load() {
		why = append(why, errors.New("the breaker is open"))
	}
	if err != nil {
		why = append(why, err)
	}
	if len(why) == 0 {
		why = append(why, errors.New("owed again: the primary charged them only in part (debt) or refused the report"))
	}
	return fmt.Errorf("fallback: Close: %s not handed over to the primary: %w", left, errors.Join(why...))
}

// leftOver describes what a Close leaves behind ("" when nothing): the
// units and keys still owed, the report calls whose reply never came and
// that are not resolved, the calls still running late and the background
// Sync still running.
func (s *Store) leftOver() string {
	c := s.ch
	var units uint64
	s.mu.Lock()
	keys := len(c.owed)
	for _, o := range c.owed {
		units += o.abs()
	}
	s.mu.Unlock()
	// work counts the keys owing and the lost calls (read without smu,
	// which a background Sync still running may hold).
	lost := max(0, c.work.Load()-int64(keys))
	var parts []string
	if keys > 0 {
		parts = append(parts, fmt.Sprintf("%d units owed over %d keys", units, keys))
	}
	if lost > 0 {
		parts = append(parts, fmt.Sprintf("%d report calls whose reply never came (unresolved)", lost))
	}
	if n := s.lateOpen.Load(); n > 0 {
		parts = append(parts, fmt.Sprintf("%d calls still running late (their local decisions unmatched)", n))
	}
	if c.running.Load() {
		parts = append(parts, "a background Sync still running")
	}
	switch len(parts) {
	case 0:
		return ""
	case 1:
		return parts[0]
	}
	out := parts[0]
	for _, p := range parts[1 : len(parts)-1] {
		out += ", " + p
	}
	return out + " and " + parts[len(parts)-1]
}
