package concurrency

// Test-only views of the limiters' state.

// KeyInFlight returns the requests in flight on this instance for key under
// the per-key cap named name, and whether such a cap exists.
func (l *Limiter) KeyInFlight(name, key string) (int64, bool) {
	k := l.keyLimit(name)
	if k == nil {
		return 0, false
	}
	sh := k.shardOf(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.m[key]; e != nil {
		return e.n, true
	}
	return 0, true
}

// Keys returns the number of keys the per-key cap named name tracks now
// (keys with requests in flight), and whether such a cap exists.
func (l *Limiter) Keys(name string) (int, bool) {
	k := l.keyLimit(name)
	if k == nil {
		return 0, false
	}
	return int(k.size.Load()), true
}

// Tracked returns the number of entries the per-key cap named name holds in
// memory: keys in flight plus idle entries kept for reuse (at most 256), and
// whether such a cap exists.
func (l *Limiter) Tracked(name string) (int, bool) {
	k := l.keyLimit(name)
	if k == nil {
		return 0, false
	}
	total := 0
	for i := range k.shards {
		sh := &k.shards[i]
		sh.mu.Lock()
		total += len(sh.m)
		sh.mu.Unlock()
	}
	return total, true
}

func (l *Limiter) keyLimit(name string) *keyLimit {
	for _, k := range l.keys {
		if k.cfg.Load().Name == name {
			return k
		}
	}
	return nil
}

// Estimate returns the unrounded limit.
func (a *Adaptive) Estimate() float64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.est
}

// Windows returns the number of windows closed so far.
func (a *Adaptive) Windows() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.windows
}

// NoLoad returns Vegas's no-load latency, and LongRTT Gradient2's
// long-run latency, in seconds.
func (a *Adaptive) NoLoad() float64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.alg.noload
}

// LongRTT returns Gradient2's long-run latency in seconds.
func (a *Adaptive) LongRTT() float64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.alg.long
}

// Waited returns how many requests were admitted with a slot that another
// request's release handed them while they waited (not those the cap let
// in as they joined the queue).
func (l *Limiter) Waited() int64 { return l.wait.waited.Load() }

// Late returns how many requests the Limiter refused at once because the
// queue's pace would serve them after their deadline.
func (l *Limiter) Late() int64 { return l.wait.late.Load() }
