package topk

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Defaults of Config.
const (
	DefaultCapacity = 64
	DefaultSlices   = 6
	DefaultInterval = time.Minute
	DefaultMaxKeys  = 64
)

// Config sizes a Summary. The zero value of each field is its default.
type Config struct {
	// Capacity is the counters of each slice of each key: at most this
	// many principals are tracked per slice, and every principal with
	// more than 1/Capacity of a slice's records is. 0 means
	// DefaultCapacity; at most 4096.
	Capacity int
	// Slices is how many slices of time the interval is cut into: the
	// oldest is forgotten whole when a new one starts. 0 means
	// DefaultSlices; at least 1, at most 60.
	Slices int
	// Interval is the time the slices span together; what Top reports
	// covers between Interval-Interval/Slices and Interval. 0 means
	// DefaultInterval; at least Slices milliseconds.
	Interval time.Duration
	// MaxKeys is how many keys (rules) are summarised at once; a record
	// of a new key beyond it takes the place of a key with nothing in the
	// interval, or is dropped (Dropped counts it). 0 means
	// DefaultMaxKeys; at most 1024.
	MaxKeys int
	// Clock reads the time; nil means floodgate.SystemClock().
	Clock floodgate.Clock
}

// Entry is one principal of one key, as Top reports it: Count may
// overstate the principal's records in the interval by Error at most,
// and never understates them (true count in [Count-Error, Count]).
type Entry struct {
	Key       string
	Principal string
	Count     uint64
	Error     uint64
}

// Summary is the heavy hitters of every key (rule) over a sliding
// interval, in memory fixed by its Config: MaxKeys x Slices sketches of
// Capacity counters of at most MaxPrincipal bytes each. Its methods are
// safe for concurrent use; records of different keys never contend.
type Summary struct {
	cfg   Config
	slice int64 // nanoseconds of one slice
	seed  maphash.Seed

	mu      sync.Mutex                         // held to add or recycle a key
	keys    atomic.Pointer[map[string]*series] // copy on write
	dropped atomic.Uint64
}

// series is the slices of one key.
type series struct {
	key string
	mu  sync.Mutex
	sk  []*sketch // by epoch modulo len
}

// New returns a Summary sized by cfg, or an error naming each bad field.
func New(cfg Config) (*Summary, error) {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf("topk: "+format, a...)) }
	if cfg.Capacity == 0 {
		cfg.Capacity = DefaultCapacity
	}
	if cfg.Slices == 0 {
		cfg.Slices = DefaultSlices
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.MaxKeys == 0 {
		cfg.MaxKeys = DefaultMaxKeys
	}
	if cfg.Clock == nil {
		cfg.Clock = floodgate.SystemClock()
	}
	if cfg.Capacity < 1 || cfg.Capacity > 4096 {
		bad("Capacity %d must be in [1, 4096]", cfg.Capacity)
	}
	if cfg.Slices < 1 || cfg.Slices > 60 {
		bad("Slices %d must be in [1, 60]", cfg.Slices)
	}
	if cfg.Interval < time.Duration(cfg.Slices)*time.Millisecond {
		bad("Interval %s must be at least %d ms (one per slice)", cfg.Interval, cfg.Slices)
	}
	if cfg.MaxKeys < 1 || cfg.MaxKeys > 1024 {
		bad("MaxKeys %d must be in [1, 1024]", cfg.MaxKeys)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	s := &Summary{cfg: cfg, slice: int64(cfg.Interval) / int64(cfg.Slices), seed: maphash.MakeSeed()}
	s.keys.Store(&map[string]*series{})
	return s, nil
}

// Interval is the Config's interval.
func (s *Summary) Interval() time.Duration { return s.cfg.Interval }

// Capacity is the Config's capacity: the most entries Top returns per
// key.
func (s *Summary) Capacity() int { return s.cfg.Capacity }

// Dropped is how many records were dropped because MaxKeys keys had
// records in the interval.
func (s *Summary) Dropped() uint64 { return s.dropped.Load() }

// epoch is the slice of time t falls in.
func (s *Summary) epoch(t time.Time) int64 {
	ns := t.UnixNano()
	e := ns / s.slice
	if ns < 0 && ns%s.slice != 0 {
		e--
	}
	return e
}

// Record counts one record of principal under key. A principal longer
// than MaxPrincipal is kept as its first MaxPrincipal-33 bytes, '#' and 32
// hex digits of its SHA-256. Once key has been seen, Record allocates
// nothing, whether it tracks principal already or not.
func (s *Summary) Record(key string, principal []byte) {
	sr := (*s.keys.Load())[key]
	if sr == nil {
		if sr = s.add(key); sr == nil {
			s.dropped.Add(1)
			return
		}
	}
	var long [MaxPrincipal]byte
	if len(principal) > MaxPrincipal {
		principal = shorten(&long, principal)
	}
	h := hashOf(s.seed, principal)
	e := s.epoch(s.cfg.Clock.Now())
	sr.mu.Lock()
	if sr.key != key { // recycled for another key meanwhile
		sr.mu.Unlock()
		s.dropped.Add(1)
		return
	}
	sk := sr.sk[mod(e, len(sr.sk))]
	switch {
	case sk.epoch < e:
		sk.reset(e) // its time came round again: forget it
	case sk.epoch > e:
		// This record read the clock a whole interval before it got the
		// lock: it is older than the interval, and must not wipe the
		// slice that now holds its place.
		sr.mu.Unlock()
		return
	}
	sk.add(principal, h)
	sr.mu.Unlock()
}

// shorten writes p's shortened form into buf.
func shorten(buf *[MaxPrincipal]byte, p []byte) []byte {
	sum := sha256.Sum256(p)
	keep := MaxPrincipal - 1 - 2*16
	n := copy(buf[:keep], p)
	buf[n] = '#'
	hex.Encode(buf[n+1:], sum[:16])
	return buf[:n+1+32]
}

func mod(e int64, n int) int {
	m := int(e % int64(n))
	if m < 0 {
		m += n
	}
	return m
}

// add returns the series of key, made (or recycled from a key with
// nothing in the interval) if it is new; nil when MaxKeys keys have
// records in the interval.
func (s *Summary) add(key string) *series {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := *s.keys.Load()
	if sr := old[key]; sr != nil {
		return sr
	}
	var sr *series
	victim := ""
	if len(old) >= s.cfg.MaxKeys {
		now := s.epoch(s.cfg.Clock.Now())
		for k, cand := range old {
			if cand.idle(now) {
				victim, sr = k, cand
				break
			}
		}
		if sr == nil {
			return nil
		}
		sr.mu.Lock()
		sr.key = key // a Record still holding the old map finds it no longer its key's
		for _, sk := range sr.sk {
			sk.reset(noEpoch)
		}
		sr.mu.Unlock()
	} else {
		sr = &series{key: key, sk: make([]*sketch, s.cfg.Slices)}
		for i := range sr.sk {
			sr.sk[i] = newSketch(s.cfg.Capacity)
			sr.sk[i].epoch = noEpoch
		}
	}
	m := make(map[string]*series, len(old)+1)
	for k, v := range old {
		if k != victim || v != sr {
			m[k] = v
		}
	}
	m[key] = sr
	s.keys.Store(&m)
	return sr
}

// noEpoch is the epoch of a sketch that counts nothing: no time falls in
// it.
const noEpoch = -1 << 62

// idle reports whether sr has no records in the interval ending in epoch
// now.
func (sr *series) idle(now int64) bool {
	sr.mu.Lock()
	defer sr.mu.Unlock()
	for _, sk := range sr.sk {
		if sk.total > 0 && sk.epoch > now-int64(len(sr.sk)) {
			return false
		}
	}
	return true
}

// Group is the summary of one key over the interval: Total is its
// records, exactly, and Entries its heaviest principals, most counted
// first.
type Group struct {
	Key     string
	Total   uint64
	Entries []Entry
}

// Top returns the groups of key, or of every key when key is "", with
// records in the interval, the most recorded first (ties by key), each
// with at most n entries (n < 1: Capacity), and the time the interval
// covers now: from the start of its oldest slice.
//
// A principal's Count adds, over the interval's slices, its counter
// where a slice tracks it and, where a slice does not, the slice's least
// count if every counter of the slice is in use (the most it can have
// been counted there); Error adds the error of each counter and the least
// counts added. So Count-Error <= true count <= Count, and Error is at
// most the interval's records of the key over Capacity. While no slice
// has more distinct principals than Capacity, Error is 0 and Count exact.
func (s *Summary) Top(key string, n int) ([]Group, time.Duration) {
	if n < 1 || n > s.cfg.Capacity {
		n = s.cfg.Capacity
	}
	now := s.cfg.Clock.Now()
	e := s.epoch(now)
	first := e - int64(s.cfg.Slices) + 1
	covered := now.Sub(time.Unix(0, first*s.slice))
	var groups []Group
	for k, sr := range *s.keys.Load() {
		if key != "" && k != key {
			continue
		}
		if g, ok := sr.top(first, n); ok {
			groups = append(groups, g)
		}
	}
	slices.SortFunc(groups, func(a, b Group) int {
		if c := cmp.Compare(b.Total, a.Total); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
	return groups, covered
}

// top merges sr's slices from epoch first on; false when they hold
// nothing.
func (sr *series) top(first int64, n int) (Group, bool) {
	sr.mu.Lock()
	defer sr.mu.Unlock()
	g := Group{Key: sr.key}
	type agg struct {
		count, err uint64
		seen       []bool // by live slice
	}
	var live []*sketch
	for _, sk := range sr.sk {
		if sk.epoch >= first && sk.total > 0 {
			live = append(live, sk)
			g.Total += sk.total
		}
	}
	if g.Total == 0 {
		return g, false
	}
	byP := map[string]*agg{}
	for i, sk := range live {
		for j := range sk.n {
			en := &sk.ent[j]
			a := byP[string(en.principal())]
			if a == nil {
				a = &agg{seen: make([]bool, len(live))}
				byP[string(en.principal())] = a
			}
			a.count += en.count
			a.err += en.err
			a.seen[i] = true
		}
	}
	for p, a := range byP {
		for i, sk := range live {
			if !a.seen[i] {
				m := sk.min()
				a.count += m
				a.err += m
			}
		}
		g.Entries = append(g.Entries, Entry{Key: sr.key, Principal: p, Count: a.count, Error: a.err})
	}
	slices.SortFunc(g.Entries, func(a, b Entry) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		if c := cmp.Compare(b.Count-b.Error, a.Count-a.Error); c != 0 {
			return c
		}
		return cmp.Compare(a.Principal, b.Principal)
	})
	if len(g.Entries) > n {
		g.Entries = g.Entries[:n]
	}
	return g, true
}

// Len is how many counters key's slices use, all together: never more
// than Slices x Capacity.
func (s *Summary) Len(key string) int {
	sr := (*s.keys.Load())[key]
	if sr == nil {
		return 0
	}
	sr.mu.Lock()
	defer sr.mu.Unlock()
	n := 0
	for _, sk := range sr.sk {
		n += sk.n
	}
	return n
}
