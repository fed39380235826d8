// Package fair counts what each caller of a stage has in flight, so that a
// stage that must refuse some requests refuses those of the callers over
// their share first (floodgate.Fairness). It decides who a caller is (the
// identity Fairness.By names), a caller's weight (its plan tier's), its
// share of a room (the room times its weight over the weights of the
// callers in flight) and whether it is under it.
//
// The counts are exact: every request a stage lets in while a Share is in
// force is held (Hold) until its Done. A caller with nothing in flight has
// no entry, so the memory a Share takes is bounded by the requests in
// flight, whatever the number of callers.
package fair

import (
	"fmt"
	"hash/maphash"
	"maps"
	"math"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/field"
)

// A caller over its share (Over) may hold its share, rounded down and at
// least one request, and never more than the room. A caller not over it
// may hold Burst times its share: random arrivals at a caller's share put
// it above its share now and then, and are not refused for it, while a
// caller whose demand exceeds its share is held to it.
const (
	Burst = 1.5
	// Over is the share of a caller's recent requests (about the last 16
	// its stage decided while refusing) refused for want of share above
	// which the caller is over its share.
	Over = 1.0 / 3
)

// refusedWeight is how much one decision moves a caller's refused share.
const refusedWeight = 1.0 / 16

// milli is the unit weights are summed in, so that the sum is atomic.
const milli = 1000

// shards is how many locks the counts are spread over.
const shards = 16

// by is the identity that tells callers apart.
type by uint8

const (
	byTenant by = iota + 1
	byUser
	byAPIKey
	byIP
)

// byNames are the values of Fairness.By, in the order of by.
var byNames = [...]string{"", "tenant", "user", "api_key", "ip"}

// key is one caller: the identity's string, or its address.
type key struct {
	s  string
	ip netip.Addr
}

// entry is a caller with requests in flight.
type entry struct {
	n       int64   // requests in flight
	queued  int64   // requests waiting in a queue (Queue)
	w       int64   // weight, in milli
	refused float64 // the share of its recent requests Admits refused (a moving average)
}

type shard struct {
	mu sync.Mutex
	m  map[key]*entry
	_  [40]byte // keep shards' locks off one cache line
}

// Share is a Fairness in force and the counts of its callers. A nil
// *Share is no fairness: Under reports true and Hold returns done.
type Share struct {
	by      by
	weights map[string]int64 // milli
	seed    maphash.Seed
	active  atomic.Int64 // the weights of the callers in flight, in milli
	shards  [shards]shard
	entries sync.Pool // *entry
	holds   sync.Pool // *held
}

// FieldErrors reports every bad field of f by its policy file key ("by",
// "weights.pro"), or nil.
func FieldErrors(f *floodgate.Fairness) []*field.Error {
	var errs []*field.Error
	if f.By == "" {
		errs = append(errs, field.Errorf("by", "required: one of tenant, user, api_key, ip"))
	} else if parseBy(f.By) == 0 {
		errs = append(errs, field.Errorf("by", "%q is not one of tenant, user, api_key, ip", f.By))
	}
	for _, t := range slices.Sorted(maps.Keys(f.Weights)) {
		w := f.Weights[t]
		if math.IsNaN(w) || w <= 0 || w > 1e6 {
			errs = append(errs, field.Errorf("weights."+t, "%v must be a number in (0, 1e6]", w))
		}
	}
	return errs
}

// Check returns FieldErrors as one error, each under parent and prefixed
// by pkg ("shedder: Config: fairness.by: ..."), or nil.
func Check(pkg, parent string, f *floodgate.Fairness) []error {
	var errs []error
	for _, e := range FieldErrors(f) {
		errs = append(errs, fmt.Errorf("%s: %w", pkg, e.Under(parent)))
	}
	return errs
}

func parseBy(s string) by {
	for i, n := range byNames {
		if i > 0 && n == s {
			return by(i)
		}
	}
	return 0
}

// Copy returns a copy of f that shares no map with it (nil for nil).
func Copy(f *floodgate.Fairness) *floodgate.Fairness {
	if f == nil {
		return nil
	}
	c := floodgate.Fairness{By: f.By}
	if f.Weights != nil {
		c.Weights = make(map[string]float64, len(f.Weights))
		for t, w := range f.Weights {
			c.Weights[t] = w
		}
	}
	return &c
}

// New returns the Share of f, nil for a nil f. f must have no FieldErrors.
func New(f *floodgate.Fairness) *Share {
	if f == nil {
		return nil
	}
	s := &Share{by: parseBy(f.By), seed: maphash.MakeSeed()}
	if len(f.Weights) > 0 {
		s.weights = make(map[string]int64, len(f.Weights))
		for t, w := range f.Weights {
			s.weights[t] = max(int64(math.Round(w*milli)), 1)
		}
	}
	for i := range s.shards {
		s.shards[i].m = map[key]*entry{}
	}
	s.entries.New = func() any { return new(entry) }
	s.holds.New = func() any {
		h := &held{s: s}
		h.done = h.release
		return h
	}
	return s
}

// Same reports whether s decides as f would: same identity and weights.
func (s *Share) Same(f *floodgate.Fairness) bool {
	if s == nil || f == nil {
		return s == nil && f == nil
	}
	if s.by != parseBy(f.By) || len(s.weights) != len(f.Weights) {
		return false
	}
	for t, w := range f.Weights {
		if s.weights[t] != max(int64(math.Round(w*milli)), 1) {
			return false
		}
	}
	return true
}

// caller returns r's caller and its weight.
func (s *Share) caller(r *floodgate.Request) (key, int64) {
	var k key
	switch s.by {
	case byTenant:
		k.s = r.Identity.Tenant
	case byUser:
		k.s = r.Identity.User
	case byAPIKey:
		k.s = r.Identity.APIKey
	case byIP:
		k.ip = r.Identity.IP
	}
	w := int64(milli)
	if r.Tier != "" {
		if tw, ok := s.weights[r.Tier]; ok {
			w = tw
		}
	}
	return k, w
}

func (s *Share) shard(k key) *shard {
	var h uint64
	if k.ip.IsValid() {
		b := k.ip.As16()
		h = maphash.Bytes(s.seed, b[:])
	} else {
		h = maphash.String(s.seed, k.s)
	}
	return &s.shards[h%shards]
}

// Limit is the most requests in flight a caller of weight w may hold in
// room when the callers in flight weigh active (w included): its share if
// it is over it, else Burst times its share; never more than the room (a
// caller alone gets no more than without fairness).
func Limit(room, w, active int64, over bool) int64 {
	if active < w {
		active = w
	}
	share := float64(room) * float64(w) / float64(active)
	if over {
		return min(room, max(1, int64(math.Floor(share))))
	}
	return min(room, int64(math.Ceil(share*Burst)))
}

// Admits reports whether r's caller holds fewer requests than its share
// of room allows (Limit), counting itself among the callers in flight;
// its recent requests refused for want of share tell whether it is held
// to its share (Over). shedding says that the stage would refuse r
// without fairness; when it would not, only a caller over its share is
// refused, at its limit, so that a caller whose demand exceeds its share
// does not take the room of the others' passing dips.
func (s *Share) Admits(r *floodgate.Request, room int64, shedding bool) bool {
	if s == nil {
		return true
	}
	k, _ := s.caller(r)
	sh := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.m[k]
	if e == nil {
		return true // it holds nothing, and every limit is at least 1
	}
	over := e.refused > Over
	if !shedding && !over {
		return true
	}
	ok := e.n < Limit(room, e.w, s.active.Load(), over)
	x := 0.0
	if !ok {
		x = 1
	}
	e.refused += (x - e.refused) * refusedWeight
	return ok
}

// Load returns what r's caller holds and has waiting (Queue) over its
// weight: of two callers, the one with the lower Load asks less of its
// share.
func (s *Share) Load(r *floodgate.Request) float64 {
	k, w := s.caller(r)
	sh := s.shard(k)
	sh.mu.Lock()
	var n int64
	if e := sh.m[k]; e != nil {
		n, w = e.n+e.queued, e.w
	}
	sh.mu.Unlock()
	return float64(n) / float64(w)
}

// Key is a caller as a Share tells callers apart (Caller).
type Key = key

// Caller returns r's caller.
func (s *Share) Caller(r *floodgate.Request) Key {
	k, _ := s.caller(r)
	return k
}

// Queue counts a request of r's caller waiting in a queue (delta 1) or
// leaving it (-1): the caller's Load counts it.
func (s *Share) Queue(r *floodgate.Request, delta int64) {
	k, w := s.caller(r)
	sh := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.m[k]
	if e == nil {
		e = s.entries.Get().(*entry)
		e.n, e.queued, e.w, e.refused = 0, 0, w, 0
		sh.m[k] = e
	}
	e.queued += delta
	s.drop(sh, k, e)
}

// drop forgets e, k's entry in sh, when k has nothing in flight and
// nothing waiting; sh.mu is held.
func (s *Share) drop(sh *shard, k key, e *entry) {
	if e.n <= 0 && e.queued <= 0 {
		delete(sh.m, k)
		s.entries.Put(e)
	}
}

// InFlight returns what r's caller holds.
func (s *Share) InFlight(r *floodgate.Request) int64 {
	k, _ := s.caller(r)
	sh := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.m[k]; e != nil {
		return e.n
	}
	return 0
}

// Callers returns how many callers have requests in flight or waiting.
func (s *Share) Callers() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// held is one request counted in its caller's entry until its Done.
type held struct {
	s    *Share
	sh   *shard
	k    key
	next floodgate.Done
	done floodgate.Done // release, bound once
}

// Hold counts one more request of r's caller in flight, and returns a
// Done that counts it out and then calls done. A nil s returns done.
func (s *Share) Hold(r *floodgate.Request, done floodgate.Done) floodgate.Done {
	if s == nil {
		return done
	}
	k, w := s.caller(r)
	sh := s.shard(k)
	sh.mu.Lock()
	e := sh.m[k]
	if e == nil {
		e = s.entries.Get().(*entry)
		e.n, e.queued, e.w, e.refused = 0, 0, w, 0
		sh.m[k] = e
	}
	if e.n == 0 {
		s.active.Add(e.w)
	}
	e.n++
	sh.mu.Unlock()
	h := s.holds.Get().(*held)
	h.sh, h.k, h.next = sh, k, done
	return h.done
}

func (h *held) release(res floodgate.Result) {
	s, sh, next := h.s, h.sh, h.next
	sh.mu.Lock()
	if e := sh.m[h.k]; e != nil {
		if e.n--; e.n == 0 {
			s.active.Add(-e.w)
		}
		s.drop(sh, h.k, e)
	}
	sh.mu.Unlock()
	h.sh, h.k, h.next = nil, key{}, nil
	s.holds.Put(h)
	if next != nil {
		next(res)
	}
}

// Scopes remembers which identities the transport in front of a stage
// fills (a strict RequireScopes), so that a Fairness by one it never
// fills is refused, now and on every reload: it would count every request
// as one caller's. The zero value has none declared and refuses nothing.
type Scopes struct {
	filled atomic.Pointer[[]string]
}

// Require declares what a transport fills; strict is the interceptor's
// WithStrictIdentity (a non-strict declaration changes nothing). Every
// strict declaration narrows what counts as filled to what all of them
// fill. It returns Check of current against that.
func (s *Scopes) Require(resolvable []string, strict bool, current *floodgate.Fairness) error {
	if !strict {
		return nil
	}
	var r []string
	prev := s.filled.Load()
	for _, x := range resolvable {
		if prev == nil || slices.Contains(*prev, x) {
			r = append(r, x)
		}
	}
	if e := check(r, current); e != nil {
		return e
	}
	s.filled.Store(&r)
	return nil
}

// Check reports a field error when f keys on an identity the declared
// transport never fills.
func (s *Scopes) Check(f *floodgate.Fairness) *field.Error {
	r := s.filled.Load()
	if r == nil {
		return nil
	}
	return check(*r, f)
}

func check(resolvable []string, f *floodgate.Fairness) *field.Error {
	if f == nil || parseBy(f.By) == 0 {
		return nil
	}
	for _, s := range resolvable {
		if s == f.By {
			return nil
		}
	}
	return field.Errorf("by", "%s: the transport fills no %s where the stage decides (the policy's identity: section, or an interceptor option; a claim is not read at a gRPC tap), so every request would count as one caller", f.By, f.By)
}

// InForce is a stage's Fairness in force: the Share counting its callers,
// the Fairness it was made from (what the stage's Config reports) and the
// identities its transport fills. The zero value has no fairness. Set is
// serialised by the stage; the rest is safe for concurrent use.
type InForce struct {
	share  atomic.Pointer[Share]
	f      atomic.Pointer[floodgate.Fairness]
	scopes Scopes
}

// Share returns the Share in force, nil without fairness.
func (i *InForce) Share() *Share { return i.share.Load() }

// Config returns a copy of the Fairness in force, nil without one.
func (i *InForce) Config() *floodgate.Fairness { return Copy(i.f.Load()) }

// Same reports whether f decides as the Fairness in force.
func (i *InForce) Same(f *floodgate.Fairness) bool { return i.share.Load().Same(f) }

// Set puts a copy of f in force (nil: none). The counts of an unchanged
// Fairness are kept; a changed one starts counting anew (the requests in
// flight are released into the counts they were held in).
func (i *InForce) Set(f *floodgate.Fairness) {
	f = Copy(f)
	i.f.Store(f)
	if !i.Same(f) {
		i.share.Store(New(f))
	}
}

// Check reports a field error when f keys on an identity the declared
// transport never fills (Scopes.Check).
func (i *InForce) Check(f *floodgate.Fairness) *field.Error { return i.scopes.Check(f) }

// Require declares what a transport fills (Scopes.Require), checking the
// Fairness in force.
func (i *InForce) Require(resolvable []string, strict bool) error {
	return i.scopes.Require(resolvable, strict, i.f.Load())
}
