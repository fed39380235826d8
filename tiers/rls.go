package tiers

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
)

// The policy's rls: section maps the descriptors of a gateway's
// rate-limit calls (Envoy's RateLimitService, served by package
// github.com/floodgate-go/floodgate/rls) to the policy's rules, so the edge
// and the services spend one budget: a descriptor is resolved into a
// floodgate.Request whose identity comes from the descriptor's entries,
// and that request is keyed by the rule exactly as a service's request
// with the same identity is, through the same escaping and hashing.

// RLSDomain maps the descriptors of one rate-limit domain (the domain a
// gateway names in each call) to the policy's rules.
type RLSDomain struct {
	// Domain is the domain's name, as the gateway sends it. Non-empty
	// and unique in the policy.
	Domain string
	// Descriptors are the descriptors the domain knows. A descriptor of
	// a call that none of them matches is not limited.
	Descriptors []RLSDescriptor
	// Quota also serves the domain to Envoy's rate limit quota service
	// (RLQS, Limiter.QuotaBuckets): a bucket id, a map, matches the
	// descriptor whose entries have its keys, in whatever order. Every
	// descriptor of such a domain has distinct keys, descriptors with
	// the same keys list them in the same order, and their rules are
	// token_bucket or gcra (what an RLQS server can charge after the
	// fact).
	Quota bool
}

// RLSDescriptor maps one descriptor shape to a rule.
//
// A call's descriptor matches when it has exactly as many entries as
// Entries and each entry matches the one at its position: same key, and
// the same value when the RLSEntry names one (or a value that starts
// with its prefix, for a wildcard value "foo*"). Where two descriptors of
// a domain share a prefix, an entry with a fixed value is preferred to a
// wildcard (the first listed that matches), and a wildcard to one that
// takes any value, position by position, without going back
// (envoyproxy/ratelimit's lookup): so [generic_key=api, user] and
// [generic_key, tenant] never compete for (generic_key=api, tenant=t).
type RLSDescriptor struct {
	// Entries is the descriptor's shape, in order; at least one, at most
	// 16.
	Entries []RLSEntry
	// Rule names the rule the descriptor is charged at. Required unless
	// Unlimited.
	Rule string
	// Method, when set, is the method the descriptor's request has
	// (a gRPC full method or HTTP route pattern, not a glob): what a rule
	// with a match on the method, or keyed on endpoint, needs. It must
	// match the rule's match. No entry may then fill endpoint.
	Method string
	// Unlimited matches the descriptor and limits nothing: Envoy is told
	// it is within its limit with no limit named and the most remaining
	// (envoyproxy/ratelimit's unlimited: true).
	Unlimited bool
	// NoLimit matches the descriptor and applies no limit to it, as a
	// descriptor that matches nothing is answered (envoyproxy/ratelimit's
	// descriptor with a value but no rate_limit): it keeps a more general
	// descriptor from matching. It names no rule, method, name or
	// replaces, and its entries fill nothing.
	NoLimit bool
	// Deny, when set, denies the descriptor whatever its cost, charging
	// nothing (envoyproxy/ratelimit's requests_per_unit: 0): the call is
	// denied, all or nothing, and the buckets of its other descriptors
	// are only read (a take of cost 0), so their decisions still name
	// their limits and what they have left. A descriptor that only peeks
	// (a cost of 0 with Peek) is allowed. It names no rule or
	// method, and needs a Name; its entries fill nothing.
	Deny *RLSDeny
	// Name names the descriptor's limit for Replaces and in the
	// gateway's answer (Envoy's current_limit.name); empty means the
	// rule's name.
	Name string
	// Replaces lists the names of limits this descriptor replaces: in a
	// call where it matches, the descriptors whose limit has one of these
	// names are not charged (envoyproxy/ratelimit's replaces).
	Replaces []string
}

// RLSDeny is a descriptor that is always over its limit
// (RLSDescriptor.Deny): a limit of 0 per Window.
type RLSDeny struct {
	// Window is the unit of the limit of 0 the gateway is told
	// (current_limit), and the window duration_until_reset counts down,
	// aligned on the Unix epoch as fixed windows are. Positive.
	Window time.Duration
	// Shadow reports the descriptor as within its limit, the limit and
	// 0 remaining still shown (envoyproxy/ratelimit's shadow_mode): it
	// denies nothing.
	Shadow bool
}

// RLSEntry is one entry of a descriptor shape: a key, and either the
// value it must have or the part of the request its value fills.
type RLSEntry struct {
	// Key is the entry's key, as the gateway sends it (remote_address,
	// generic_key, a request_headers descriptor_key...). Non-empty.
	Key string
	// Value, when set, is the value the entry must have to match. A value
	// ending in '*' is a wildcard: it matches every value that starts
	// with what precedes the '*' (envoyproxy/ratelimit's wildcard
	// values). With As, each value it matches keys a bucket of its own;
	// without, every value it matches shares the descriptor's buckets
	// (envoyproxy/ratelimit's share_threshold).
	Value string
	// As, when set (instead of a fixed Value), names what the entry's value
	// fills in the descriptor's request, whatever it is: a key scope of
	// the rule (ip, user, tenant, api_key, endpoint, or header:<name> for
	// the rule's header scopes and header matches), or tier (the plan
	// tier rules with rate "tier" and match.tier read). An ip value is an
	// address, or a network no wider than the rule's ip prefix (Envoy's
	// masked_remote_address); any other value, or a wider network, keys
	// no bucket, and the rule then does not apply (Decision.Skipped).
	// The empty value keys a bucket of its own, whatever the entry fills
	// (envoyproxy/ratelimit counts it apart from every other value);
	// for tier it is the default tier.
	As string
}

// maxRLSEntries is the most entries a descriptor shape may have.
const maxRLSEntries = 16

// DescriptorEntry is one entry of a gateway's rate-limit descriptor:
// Envoy's (key, value).
type DescriptorEntry struct {
	// Key is the entry's key (remote_address, generic_key, a header's
	// descriptor_key...).
	Key string
	// Value is the entry's value.
	Value string
}

// Descriptor is one descriptor of a gateway's rate-limit call (Envoy's
// RateLimitDescriptor).
type Descriptor struct {
	// Entries are the descriptor's entries, in order.
	Entries []DescriptorEntry
	// Cost is what the descriptor charges at its rule (Envoy's
	// hits_addend), unless the rule has a cost of its own; 0 means 1.
	// Negative is an error.
	Cost int64
	// Peek decides the descriptor without charging it (Envoy's
	// per-descriptor hits_addend of 0: check only).
	Peek bool
	// Limit, when not nil, is the descriptor's own limit (Envoy's limit
	// override, RateLimitDescriptor.limit): Rate per Period, in a fixed
	// window aligned on the Unix epoch, instead of what the mapping says.
	// It counts where envoyproxy/ratelimit counts it, in the counter of
	// the domain, its entries and the Period: when the mapping's
	// descriptor for these entries has a rule of one fixed window of
	// that Period (no tier rate, cost of its own, roll-out or shaping,
	// and shadow only as the whole policy is) and every entry's value is
	// fixed or keys the rule's bucket, in that rule's bucket; otherwise
	// in a bucket of its own, keyed by the domain, every entry's key and
	// value, and the Period. Whoever counts in a bucket judges it by its
	// own Rate (two overrides that differ only in Rate share it). It is
	// decided as its own limit (Policy PolicyDescriptorLimit), is not
	// named (Name is empty), and
	// replaces and is replaced by nothing. The domain must be in the
	// rls: section. A Rate of 0 always denies, charging nothing. Only
	// Rate and Period are read: Period in [quota.MinPeriod,
	// quota.MaxPeriod], Rate in [0, quota.MaxRate].
	Limit *quota.Limit
	// GiveBack gives Cost units back to the buckets the descriptor would
	// be charged (Envoy's is_negative_hits: a request's hits given back
	// when it ends), through the store's Settle, instead of charging
	// them: the descriptor is allowed and decides nothing (its Decision
	// names no Policy). A bucket never holds more than its capacity, and
	// a fixed window gives back only what its current window holds.
	GiveBack bool
}

// DescriptorMatch is how a call's descriptor met the policy's rls:
// section.
type DescriptorMatch uint8

// How a descriptor met the mapping.
const (
	// DescriptorUnknown: the domain, or no descriptor of it, matches: the
	// descriptor is not limited (Envoy's "OK, no limit").
	DescriptorUnknown DescriptorMatch = iota
	// DescriptorLimited: the descriptor was decided by its rule
	// (Decision). Its rule may still not have applied (Decision.Skipped
	// names it, Decision.Policy is empty): a value that keys no bucket.
	DescriptorLimited
	// DescriptorUnlimited: the descriptor matched an unlimited one.
	DescriptorUnlimited
	// DescriptorReplaced: another descriptor of the call replaces its
	// limit (RLSDescriptor.Replaces); it was not charged.
	DescriptorReplaced
	// DescriptorNoLimit: the descriptor matched one with no limit
	// (RLSDescriptor.NoLimit); it is answered as an unknown one.
	DescriptorNoLimit
)

var matchNames = [...]string{"unknown", "limited", "unlimited", "replaced", "no limit"}

// String returns "unknown", "limited", "unlimited", "replaced" or "no
// limit".
func (m DescriptorMatch) String() string {
	if int(m) < len(matchNames) {
		return matchNames[m]
	}
	return "match(" + strconv.Itoa(int(m)) + ")"
}

// DescriptorDecision is what AdmitDescriptors decided for one descriptor.
type DescriptorDecision struct {
	// Match is how the descriptor met the mapping.
	Match DescriptorMatch
	// Decision is the descriptor's own decision, as AdmitMany reports an
	// item's: Allowed is whether its own buckets admit it. For a
	// descriptor that is not DescriptorLimited it is the allowed decision
	// with no Policy.
	Decision floodgate.Decision
	// Name is the descriptor's limit name (RLSDescriptor.Name, else its
	// rule's); empty when the descriptor matched nothing.
	Name string
	// Bucket is the limit of the binding bucket (its rate and period),
	// when Decision names a Policy.
	Bucket quota.Limit
	// Request is the request the descriptor was resolved as (for
	// telemetry: its identity is the descriptor's); its Headers are not
	// kept.
	Request floodgate.Request
}

// MaxDescriptors is the most descriptors one AdmitDescriptors call
// decides.
const MaxDescriptors = 64

// AdmitDescriptors decides a gateway's rate-limit call under the policy's
// rls: section: domain is the call's domain and ds its descriptors. Each
// descriptor that the domain's mapping matches is resolved into a request
// of its own (identity, tier, headers and method from the mapping and its
// entries; Cost from the descriptor) limited to its rule, and every such
// request is decided by AdmitMany, all or nothing, in one Store.Take: a
// call denied at one descriptor charges no other. The mapping and the
// rules come from the same policy, so a reload swaps both at once.
//
// A descriptor with a limit of its own (Descriptor.Limit) is decided at
// that limit instead of its mapping's rule, in the same take. A
// descriptor that matches a deny mapping (RLSDescriptor.Deny), or has a
// limit of 0 of its own, denies the call before anything is charged: the
// other descriptors' buckets are then only read, in a take of cost 0, and
// each is decided by whether what it has left covers its cost. When the
// take denies, the shadow rules' buckets (which a call that is allowed
// charges in a second take) are read the same way, so a shadow
// descriptor that would deny says so. A descriptor that gives back
// (Descriptor.GiveBack) is settled first, in one Settle, and decides
// nothing.
//
// out (len(out) >= len(ds)) receives each descriptor's decision. A
// descriptor no mapping matches, an unlimited one, a no_limit one and one
// replaced by another's limit are allowed and charge nothing (Match says
// which). The returned decision is the call's, as AdmitMany's; an unknown
// domain allows everything. Errors are AdmitMany's and a failed give-back's,
// and a descriptor with a negative Cost or a bad Limit, or more than
// MaxDescriptors descriptors, deny the call without charging anything.
func (l *Limiter) AdmitDescriptors(ctx context.Context, domain string, ds []Descriptor, out []DescriptorDecision) (floodgate.Decision, error) {
	if err := checkDescriptors(ds, out); err != nil {
		return floodgate.Decision{Stage: floodgate.StageTiers}, err
	}
	allow := floodgate.Decision{Allowed: true, Stage: floodgate.StageTiers}
	c := l.state.Load()
	var root *rlsNode
	if c.rls != nil {
		root = c.rls.domains[domain]
	}
	for i := range ds {
		out[i] = DescriptorDecision{Decision: allow}
	}
	if root == nil {
		return allow, nil
	}
	sc := l.pool.Get().(*scratch)
	defer l.release(sc)
	sc.domain = domain
	if !sc.matchDescriptors(root, ds, out) {
		return allow, nil
	}
	var giveErr error
	if sc.gives {
		giveErr = l.giveBackDescriptors(ctx, c, sc, ds, out)
	}
	if sc.denies {
		if k := l.denyDescriptors(sc, ds, out); k >= 0 {
			l.readDenied(ctx, c, sc, ds, out)
			return out[k].Decision, giveErr
		}
	}
	sc.descriptorItems(ds, out, false)
	if len(sc.items) == 0 {
		return allow, giveErr
	}
	sc.dec = grow(sc.dec, len(sc.items))
	var d floodgate.Decision
	_, err := l.run(ctx, c, sc, sc.dec, &d, call{peekShadows: true})
	sc.decided(ds, out)
	if giveErr != nil {
		err = errors.Join(giveErr, err)
	}
	return d, err
}

// checkDescriptors reports what is wrong with a call's descriptors and
// the room for their decisions, or nil. It is a call of its own, never
// inlined, as readDenied is: the errors it builds are off the stack of a
// call that decides (see localfirst's takeLocal).
//
//go:noinline
func checkDescriptors(ds []Descriptor, out []DescriptorDecision) error {
	switch {
	case len(out) < len(ds):
		return fmt.Errorf("tiers: AdmitDescriptors: out has room for %d decisions, want one per descriptor (%d)", len(out), len(ds))
	case len(ds) > MaxDescriptors:
		return fmt.Errorf("tiers: AdmitDescriptors: %d descriptors; at most %d", len(ds), MaxDescriptors)
	}
	for i := range ds {
		if ds[i].Cost < 0 {
			return fmt.Errorf("%w: descriptors[%d] costs %d", ErrInvalidCost, i, ds[i].Cost)
		}
		if lim := ds[i].Limit; lim != nil && (lim.Rate < 0 || lim.Rate > quota.MaxRate || lim.Period < quota.MinPeriod || lim.Period > quota.MaxPeriod) {
			return fmt.Errorf("tiers: AdmitDescriptors: descriptors[%d].Limit: %d per %s: want a rate in [0, %d] per a period in [%s, %s]",
				i, lim.Rate, lim.Period, quota.MaxRate, quota.MinPeriod, quota.MaxPeriod)
		}
	}
	return nil
}

// readDenied fills in, for a call a descriptor denied before anything
// was charged, what the other descriptors' buckets have left: charging
// nothing, they are only read, so their answers show their limits.
//
//go:noinline
func (l *Limiter) readDenied(ctx context.Context, c *compiled, sc *scratch, ds []Descriptor, out []DescriptorDecision) {
	sc.descriptorItems(ds, out, false)
	if len(sc.items) == 0 {
		return
	}
	sc.dec = grow(sc.dec, len(sc.items))
	var d floodgate.Decision
	if _, err := l.run(ctx, c, sc, sc.dec, &d, call{read: true}); err == nil {
		sc.decided(ds, out)
	}
}

// decided writes into out the decision of each descriptor a take decided
// (sc.dec, by its item).
func (sc *scratch) decided(ds []Descriptor, out []DescriptorDecision) {
	for i := range ds {
		if !sc.byTake(i, ds, out) || ds[i].GiveBack {
			continue
		}
		k := sc.idx[i]
		out[i].Decision = sc.dec[k]
		out[i].Request = *sc.items[k].req
		out[i].Request.Headers = nil
		if b := sc.bound[k]; b >= 0 {
			out[i].Bucket = sc.all[b].Limit
		}
	}
}

// byTake reports whether descriptor i is decided by a take (or given back):
// limited, and not denied by its mapping or a limit of 0.
func (sc *scratch) byTake(i int, ds []Descriptor, out []DescriptorDecision) bool {
	if out[i].Match != DescriptorLimited {
		return false
	}
	if lim := ds[i].Limit; lim != nil {
		return lim.Rate > 0
	}
	return sc.targets[i].deny == nil
}

// giveBackDescriptors gives the units of the descriptors with GiveBack
// back to the buckets they would be charged, in one Settle.
func (l *Limiter) giveBackDescriptors(ctx context.Context, c *compiled, sc *scratch, ds []Descriptor, out []DescriptorDecision) error {
	sc.descriptorItems(ds, out, true)
	if len(sc.items) == 0 {
		return nil
	}
	for i := range ds {
		if sc.byTake(i, ds, out) && ds[i].GiveBack {
			out[i].Request = *sc.items[sc.idx[i]].req
			out[i].Request.Headers = nil
		}
	}
	if l.sh.settler == nil {
		return errors.New("tiers: AdmitDescriptors: the store cannot give units back (it is not a quota.Settler): nothing given back")
	}
	sc.dec = grow(sc.dec, len(sc.items))
	sc.reset()
	sc.gather(c, sc.dec, call{}) // a listed address has no bucket to give back to
	n := 0
	for i := range sc.all {
		if sc.all[i].Cost > 0 {
			sc.all[n] = sc.all[i]
			sc.all[n].Cost = -sc.all[i].Cost
			n++
		}
	}
	if n == 0 {
		return nil
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.sh.timeout)
	err := l.sh.settler.Settle(sctx, sc.all[:n], nil)
	cancel()
	if err != nil {
		l.sh.failed.Add(1)
		return fmt.Errorf("tiers: AdmitDescriptors: giving units back: %w", err)
	}
	l.sh.settled.Add(1)
	return nil
}

// matchDescriptors looks up each descriptor's target under root (into
// sc.targets), sets its Match and Name in out, and marks the descriptors
// whose limit another one replaces. It reports whether any is limited.
func (sc *scratch) matchDescriptors(root *rlsNode, ds []Descriptor, out []DescriptorDecision) bool {
	sc.targets = grow(sc.targets, len(ds))
	targets := sc.targets
	replacing := false
	for i := range ds {
		if lim := ds[i].Limit; lim != nil { // its own limit, whatever the mapping says
			targets[i] = nil
			if t := root.lookup(ds[i].Entries); t != nil && t.share != 0 && t.share == lim.Period && lim.Rate > 0 {
				targets[i] = t // charged at t's rule's bucket, at its own rate
			}
			out[i].Match = DescriptorLimited
			continue
		}
		t := root.lookup(ds[i].Entries)
		targets[i] = t
		if t == nil {
			continue
		}
		if t.noLimit {
			out[i].Match = DescriptorNoLimit
			continue
		}
		out[i].Name = t.name
		out[i].Match = DescriptorLimited
		if t.unlimited {
			out[i].Match = DescriptorUnlimited
		}
		replacing = replacing || len(t.replaces) > 0
	}
	limited := false
	sc.denies, sc.gives = false, false
	for i := range ds {
		t := targets[i]
		if out[i].Match != DescriptorLimited {
			continue
		}
		if ds[i].Limit != nil { // its own limit
			limited = true
			sc.denies = sc.denies || ds[i].Limit.Rate == 0
			sc.gives = sc.gives || ds[i].GiveBack && ds[i].Limit.Rate > 0
			continue
		}
		for j := range ds {
			if !replacing {
				break
			}
			if tj := targets[j]; tj != nil && ds[j].Limit == nil && slices.Contains(tj.replaces, t.name) {
				out[i].Match = DescriptorReplaced
				break
			}
		}
		limited = limited || out[i].Match == DescriptorLimited
		sc.denies = sc.denies || out[i].Match == DescriptorLimited && t.deny != nil
		sc.gives = sc.gives || out[i].Match == DescriptorLimited && t.deny == nil && ds[i].GiveBack
	}
	return limited
}

// denyDescriptors decides the limited descriptors whose target denies
// (RLSDescriptor.Deny) into out, and returns the first that denies the
// call, or -1.
func (l *Limiter) denyDescriptors(sc *scratch, ds []Descriptor, out []DescriptorDecision) int {
	first := -1
	now := l.sh.clock.Now().UnixNano()
	for i := range ds {
		if out[i].Match != DescriptorLimited || sc.byTake(i, ds, out) || ds[i].GiveBack {
			continue // a give-back never denies
		}
		t := sc.targets[i]
		deny, name, method := RLSDeny{}, PolicyDescriptorLimit, ""
		if ds[i].Limit == nil {
			deny, name, method = *t.deny, t.name, t.method
		} else { // its own limit of 0
			deny.Window = ds[i].Limit.Period
		}
		w := int64(deny.Window)
		d := &out[i].Decision
		*d = floodgate.Decision{Stage: floodgate.StageTiers, Source: floodgate.SourcePolicy, Policy: name, Window: deny.Window,
			Reset: time.Duration(w - now%w), Allowed: ds[i].Peek || deny.Shadow, Shadow: deny.Shadow && !ds[i].Peek}
		out[i].Bucket = quota.Limit{Period: deny.Window}
		out[i].Request = floodgate.Request{Method: method, Cost: ds[i].Cost}
		if !d.Allowed && first < 0 {
			first = i
		}
	}
	return first
}

// descriptorItems builds, for each limited descriptor that a take
// decides and that gives back (give) or not, its request (in sc.req,
// headers in sc.hdrs, both sized first so the pointers taken into them
// stay valid) and the engine's item limited to its rule or its own limit
// (sc.items; sc.idx maps a descriptor to its item).
func (sc *scratch) descriptorItems(ds []Descriptor, out []DescriptorDecision, give bool) {
	nreq, nhdr := 0, 0
	for i := range ds {
		if sc.byTake(i, ds, out) && ds[i].GiveBack == give {
			nreq++
			if sc.targets[i] == nil {
				continue
			}
			for _, f := range sc.targets[i].fills {
				if f.scope == ScopeHeader {
					nhdr++
				}
			}
		}
	}
	sc.req = grow(sc.req, nreq)
	sc.hdrs = grow(sc.hdrs, nhdr)[:0]
	sc.items = sc.items[:0]
	sc.idx = grow(sc.idx, len(ds))
	for i := range ds {
		if !sc.byTake(i, ds, out) || ds[i].GiveBack != give {
			continue
		}
		t := sc.targets[i]
		r := &sc.req[len(sc.items)]
		if t == nil { // its own limit
			*r = floodgate.Request{Cost: ds[i].Cost}
			sc.idx[i] = int32(len(sc.items))
			sc.items = append(sc.items, callItem{req: r, rule: -1, peek: ds[i].Peek, own: &ds[i]})
			continue
		}
		var own *Descriptor
		if ds[i].Limit != nil { // its own limit, at t's rule's bucket
			own = &ds[i]
		}
		*r = floodgate.Request{Method: t.method, Cost: ds[i].Cost}
		h0 := len(sc.hdrs)
		var empty uint8
		for _, f := range t.fills {
			v := ds[i].Entries[f.entry].Value
			switch {
			case f.kind == fillTier:
				r.Tier = v
			case v == "": // keys a bucket of its own, as envoyproxy/ratelimit counts "key_" apart
				empty |= 1 << f.scope
				if f.scope == ScopeHeader {
					sc.hdrs = append(sc.hdrs, floodgate.Header{Name: f.header})
				}
			case f.scope == ScopeHeader:
				sc.hdrs = append(sc.hdrs, floodgate.Header{Name: f.header, Value: v})
			default:
				t.fill(r, f.scope, v)
			}
		}
		if len(sc.hdrs) > h0 {
			r.Headers = sc.hdrs[h0:len(sc.hdrs):len(sc.hdrs)]
		}
		sc.idx[i] = int32(len(sc.items))
		sc.items = append(sc.items, callItem{req: r, rule: t.ruleIdx, peek: ds[i].Peek, empty: empty, own: own})
	}
}

// fill sets scope s of r to the descriptor value v. An ip value that is no
// address, or a network wider than the rule's ip prefix, sets nothing: the
// rule then lacks its ip and does not apply.
func (t *rlsTarget) fill(r *floodgate.Request, s Scope, v string) {
	id := &r.Identity
	switch s {
	case ScopeEndpoint:
		r.Method = v
	case ScopeUser:
		id.User = v
	case ScopeTenant:
		id.Tenant = v
	case ScopeAPIKey:
		id.APIKey = v
	case ScopeIP:
		id.IP = t.ipOf(v)
	}
}

// ipOf parses an ip descriptor value: an address, or a network (Envoy's
// masked_remote_address) whose prefix is at least the rule's ip prefix
// for its family, as its address; the invalid Addr otherwise.
func (t *rlsTarget) ipOf(v string) netip.Addr {
	if !strings.Contains(v, "/") {
		a, err := netip.ParseAddr(v)
		if err != nil {
			return netip.Addr{}
		}
		return a.WithZone("")
	}
	p, err := netip.ParsePrefix(v)
	if err != nil || p.Addr().Zone() != "" {
		return netip.Addr{}
	}
	p = p.Masked()
	bits, a := p.Bits(), p.Addr()
	if a.Is4In6() {
		if bits < 96 {
			return netip.Addr{}
		}
		bits, a = bits-96, a.Unmap()
	}
	need := t.ip6
	if a.Is4() {
		need = t.ip4
	}
	if bits < need {
		return netip.Addr{}
	}
	return a
}

// resolveOwn appends to sc.metas and sc.all the one bucket of item it, a
// descriptor with a limit of its own (Descriptor.Limit), its key built in
// sc.buf: "<prefix>{rls:<domain>:<key0>=<value0>[:<keyI>=<valueI>]...}:fixed_window:<period>",
// every domain, key and value escaped or hashed as identity components
// are (the empty value written as nothing), so it parses back uniquely
// and is no rule's key (a rule's first "{...}" holds no ':').
func (sc *scratch) resolveOwn(c *compiled, it *callItem) {
	sc.buf = sc.buf[:0]
	sc.skipped = sc.skipped[:0]
	cr := &c.rls.own
	d := it.own
	start := len(sc.buf)
	sc.buf = append(sc.buf, cr.prefix...)
	sc.buf = append(sc.buf, "{rls:"...)
	sc.buf = sc.kb.appendEscaped(sc.buf, sc.domain)
	for _, e := range d.Entries {
		sc.buf = append(sc.buf, ':')
		sc.buf = sc.kb.appendEscaped(sc.buf, e.Key)
		sc.buf = append(sc.buf, '=')
		sc.buf = sc.kb.appendEscaped(sc.buf, e.Value)
	}
	sc.buf = append(sc.buf, "}:fixed_window:"...)
	sc.buf = append(sc.buf, shortDuration(d.Limit.Period)...)
	cost, fromRequest := it.req.Cost, true
	if cost == 0 {
		cost, fromRequest = 1, false
	}
	sc.metas = append(sc.metas, meta{rule: -1, start: int32(start), end: int32(len(sc.buf)), fromRequest: fromRequest, shadow: cr.shadow})
	sc.addBucket("", quota.Limit{Algorithm: quota.FixedWindow, Rate: d.Limit.Rate, Period: d.Limit.Period}, cost, cr)
}

// resolveShared resolves item it, a descriptor with a limit of its own
// whose entries key the bucket of the rule it.rule (rlsTarget.share): that
// bucket, at the descriptor's rate, decided as its own limit is; when the
// rule does not resolve to that one bucket, the descriptor's own bucket
// (resolveOwn).
func (sc *scratch) resolveShared(c *compiled, it *callItem, from int) {
	sc.resolve(c, it.req, int(it.rule), int(it.rule)+1)
	if len(sc.all) == from+1 && sc.all[from].Limit.Algorithm == quota.FixedWindow && sc.all[from].Limit.Period == it.own.Limit.Period {
		sc.all[from].Limit = quota.Limit{Algorithm: quota.FixedWindow, Rate: it.own.Limit.Rate, Period: it.own.Limit.Period}
		m := &sc.metas[from]
		m.rule, m.multi, m.shadow = -1, false, c.rls.own.shadow
		return
	}
	clear(sc.all[from:])
	sc.all, sc.metas = sc.all[:from], sc.metas[:from]
	sc.resolveOwn(c, it)
}
