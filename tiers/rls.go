package tiers

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
)

// The policy's rls: section (issue 20) maps the descriptors of a gateway's
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
}

// RLSDescriptor maps one descriptor shape to a rule.
//
// A call's descriptor matches when it has exactly as many entries as
// Entries and each entry matches the one at its position: same key, and
// the same value when the RLSEntry names one. Where two descriptors of a
// domain share a prefix, an entry with a fixed value is preferred to one
// that takes any value, position by position, without going back
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
	// it is within its limit with no limit named.
	Unlimited bool
	// Name names the descriptor's limit for Replaces and in the
	// gateway's answer (Envoy's current_limit.name); empty means the
	// rule's name.
	Name string
	// Replaces lists the names of limits this descriptor replaces: in a
	// call where it matches, the descriptors whose limit has one of these
	// names are not charged (envoyproxy/ratelimit's replaces).
	Replaces []string
}

// RLSEntry is one entry of a descriptor shape: a key, and either the
// value it must have or the part of the request its value fills.
type RLSEntry struct {
	// Key is the entry's key, as the gateway sends it (remote_address,
	// generic_key, a request_headers descriptor_key...). Non-empty.
	Key string
	// Value, when set, is the value the entry must have to match.
	Value string
	// As, when set (instead of Value), names what the entry's value
	// fills in the descriptor's request, whatever it is: a key scope of
	// the rule (ip, user, tenant, api_key, endpoint, or header:<name> for
	// the rule's header scopes and header matches), or tier (the plan
	// tier rules with rate "tier" and match.tier read). An ip value is an
	// address, or a network no wider than the rule's ip prefix (Envoy's
	// masked_remote_address); any other value, or a wider network, keys
	// no bucket, and the rule then does not apply (Decision.Skipped).
	As string
}

// maxRLSEntries is the most entries a descriptor shape may have.
const maxRLSEntries = 16

// fillKind is what a descriptor entry's value fills in its request.
type fillKind uint8

const (
	fillNone fillKind = iota
	fillScope
	fillTier
)

// rlsFill says where the value of entry entry goes.
type rlsFill struct {
	entry  int32
	kind   fillKind
	scope  Scope
	header string // for ScopeHeader: the lower-case header name
}

// rlsTarget is a compiled RLSDescriptor.
type rlsTarget struct {
	path      string // "rls[0].descriptors[2]"
	rule      string
	ruleIdx   int32 // index in compiled.rules, set by bind
	name      string
	method    string
	unlimited bool
	replaces  []string
	fills     []rlsFill
	// ip4, ip6 are the rule's ip prefix lengths: a network value no
	// wider than them keys the bucket of its address.
	ip4, ip6 int
}

type rlsKV struct{ key, value string }

// rlsNode is a node of a domain's lookup tree: its children by key and
// value, and by key alone (any value), and the target of a descriptor
// that ends here.
type rlsNode struct {
	byValue map[rlsKV]*rlsNode
	byKey   map[string]*rlsNode
	target  *rlsTarget
}

// rlsCompiled is the compiled rls: section, and the rules by name.
type rlsCompiled struct {
	domains   map[string]*rlsNode
	targets   []*rlsTarget
	ruleIndex map[string]int32
}

// compileRLS checks p.RLS against the policy's rules (byName, before the
// rules are sorted) and stores its lookup trees in c.rls. Errors go to
// rep.
func compileRLS(rep *reporter, p *Policy, byName map[string]*cRule, c *compiled) {
	rc := &rlsCompiled{}
	c.rls = rc
	if len(p.RLS) == 0 {
		return
	}
	rc.domains = make(map[string]*rlsNode, len(p.RLS))
	seen := make(map[string]int, len(p.RLS))
	for i := range p.RLS {
		dom := &p.RLS[i]
		dp := "rls[" + strconv.Itoa(i) + "]"
		if dom.Domain == "" {
			rep.add(dp+".domain", "required")
			continue
		}
		if j, dup := seen[dom.Domain]; dup {
			rep.addf(dp+".domain", "%q is already the domain of rls[%d]", dom.Domain, j)
			continue
		}
		seen[dom.Domain] = i
		if len(dom.Descriptors) == 0 {
			rep.add(dp+".descriptors", "list at least one descriptor")
			continue
		}
		root := &rlsNode{}
		rc.domains[dom.Domain] = root
		for j := range dom.Descriptors {
			t := compileTarget(rep, dp+".descriptors["+strconv.Itoa(j)+"]", &dom.Descriptors[j], p, byName)
			if t == nil {
				continue
			}
			if prev := root.insert(dom.Descriptors[j].Entries, t); prev != nil {
				rep.addf(t.path+".entries", "the same entries as %s: a descriptor matches one of them only", prev.path)
				continue
			}
			rc.targets = append(rc.targets, t)
		}
	}
}

// bind sets each target's rule index once c.rules is in its final order.
func (rc *rlsCompiled) bind(rules []cRule) {
	rc.ruleIndex = make(map[string]int32, len(rules))
	for i := range rules {
		rc.ruleIndex[rules[i].name] = int32(i)
	}
	for _, t := range rc.targets {
		if !t.unlimited {
			t.ruleIdx = rc.ruleIndex[t.rule]
		}
	}
}

// insert adds a descriptor shape ending at t; it returns the target
// already there, if any, and adds nothing then.
func (n *rlsNode) insert(entries []RLSEntry, t *rlsTarget) *rlsTarget {
	for _, e := range entries {
		var next *rlsNode
		if e.Value != "" {
			if n.byValue == nil {
				n.byValue = map[rlsKV]*rlsNode{}
			}
			k := rlsKV{e.Key, e.Value}
			if next = n.byValue[k]; next == nil {
				next = &rlsNode{}
				n.byValue[k] = next
			}
		} else {
			if n.byKey == nil {
				n.byKey = map[string]*rlsNode{}
			}
			if next = n.byKey[e.Key]; next == nil {
				next = &rlsNode{}
				n.byKey[e.Key] = next
			}
		}
		n = next
	}
	if n.target != nil {
		return n.target
	}
	n.target = t
	return nil
}

// lookup returns the target of a call's descriptor, or nil.
func (n *rlsNode) lookup(entries []DescriptorEntry) *rlsTarget {
	if len(entries) == 0 {
		return nil
	}
	for _, e := range entries {
		var next *rlsNode
		if n.byValue != nil {
			next = n.byValue[rlsKV{e.Key, e.Value}]
		}
		if next == nil && n.byKey != nil {
			next = n.byKey[e.Key]
		}
		if next == nil {
			return nil
		}
		n = next
	}
	return n.target
}

// parseAs parses RLSEntry.As.
func parseAs(s string) (rlsFill, error) {
	switch s {
	case "tier":
		return rlsFill{kind: fillTier}, nil
	case "header":
		return rlsFill{}, fmt.Errorf(`"header" needs a name: header:<name>`)
	}
	if name, ok := strings.CutPrefix(s, "header:"); ok {
		h, err := headerName(name)
		if err != nil {
			return rlsFill{}, err
		}
		return rlsFill{kind: fillScope, scope: ScopeHeader, header: h}, nil
	}
	sc, err := ParseScope(s)
	if err != nil {
		return rlsFill{}, fmt.Errorf("unknown %q (want ip, user, tenant, api_key, endpoint, header:<name> or tier)", s)
	}
	return rlsFill{kind: fillScope, scope: sc}, nil
}

// compileTarget checks one RLSDescriptor at path dp; nil when it is
// unusable (its errors are reported).
func compileTarget(rep *reporter, dp string, d *RLSDescriptor, p *Policy, byName map[string]*cRule) *rlsTarget {
	ok := true
	t := &rlsTarget{path: dp, rule: d.Rule, name: d.Name, method: d.Method, unlimited: d.Unlimited, replaces: slices.Clone(d.Replaces)}
	switch {
	case len(d.Entries) == 0:
		rep.add(dp+".entries", "list at least one entry")
		ok = false
	case len(d.Entries) > maxRLSEntries:
		rep.addf(dp+".entries", "%d entries; at most %d", len(d.Entries), maxRLSEntries)
		ok = false
	}
	for k, e := range d.Entries {
		ep := dp + ".entries[" + strconv.Itoa(k) + "]"
		if e.Key == "" {
			rep.add(ep+".key", "required")
			ok = false
		}
		switch {
		case e.Value != "" && e.As != "":
			rep.add(ep, "set value (the value it must have) or as (what its value fills), not both")
			ok = false
		case e.Value == "" && e.As == "" && !d.Unlimited:
			rep.add(ep, "matches any value but keys none: envoyproxy/ratelimit counts each value apart; say what the value fills with as (ip, user, tenant, api_key, endpoint, header:<name>, tier), or match a fixed value")
			ok = false
		case e.As != "" && d.Unlimited:
			rep.add(ep+".as", "an unlimited descriptor charges nothing, so its values fill nothing: remove as")
			ok = false
		case e.As != "":
			f, err := parseAs(e.As)
			if err != nil {
				rep.add(ep+".as", err.Error())
				ok = false
				continue
			}
			f.entry = int32(k)
			t.fills = append(t.fills, f)
		}
	}
	for k, r := range d.Replaces {
		if r == "" {
			rep.add(dp+".replaces["+strconv.Itoa(k)+"]", "must not be empty")
			ok = false
		}
	}
	if d.Name != "" && !printable(d.Name) {
		rep.addf(dp+".name", "%q must be printable ASCII", d.Name)
		ok = false
	}
	if d.Unlimited {
		if d.Rule != "" || d.Method != "" {
			rep.add(dp+".unlimited", "an unlimited descriptor names no rule or method")
			ok = false
		}
		if slices.Contains(d.Replaces, d.Name) && d.Name != "" {
			rep.add(dp+".replaces", "a limit cannot replace itself")
			ok = false
		}
		if !ok {
			return nil
		}
		return t
	}
	if d.Rule == "" {
		rep.add(dp+".rule", "required (or unlimited: true)")
		return nil
	}
	cr, found := byName[d.Rule]
	if !found {
		if !slices.ContainsFunc(p.Rules, func(r Rule) bool { return r.Name == d.Rule }) {
			rep.addf(dp+".rule", "no rule is named %q", d.Rule)
		} // else: the rule has errors of its own, reported already
		return nil
	}
	if t.name == "" {
		t.name = cr.name
	}
	if slices.Contains(d.Replaces, t.name) {
		rep.addf(dp+".replaces", "%q is this descriptor's own limit: a limit cannot replace itself", t.name)
		ok = false
	}
	t.ip4, t.ip6 = cr.v4bits, cr.v6bits
	if !checkFills(rep, dp, d, t, cr, p) {
		ok = false
	}
	if !ok {
		return nil
	}
	return t
}

// checkFills checks what a descriptor's entries fill against its rule:
// every fill is something the rule keys or matches on, nothing is filled
// twice, and every key scope and header match of the rule is filled.
func checkFills(rep *reporter, dp string, d *RLSDescriptor, t *rlsTarget, cr *cRule, p *Policy) bool {
	ok := true
	endpoint := false
	seen := make(map[string]int32, len(t.fills))
	for _, f := range t.fills {
		fp := dp + ".entries[" + strconv.Itoa(int(f.entry)) + "].as"
		label := f.label()
		if first, dup := seen[label]; dup {
			rep.addf(fp, "%s is already filled by entries[%d]", label, first)
			ok = false
			continue
		}
		seen[label] = f.entry
		switch {
		case f.kind == fillTier:
			if !cr.byTier && (cr.cond == nil || cr.cond.tiers == nil) {
				rep.addf(fp, "rule %q neither has rate tier nor matches on the tier: the tier would change nothing", cr.name)
				ok = false
			}
		case f.scope == ScopeHeader:
			if !slices.Contains(cr.keyHeaders, f.header) && !cr.matchesHeader(f.header) {
				rep.addf(fp, "rule %q neither keys nor matches on header %q (its key is [%s])", cr.name, f.header, cr.keyList())
				ok = false
			}
		case f.scope == ScopeEndpoint:
			endpoint = true
			if !slices.Contains(cr.key, ScopeEndpoint) && cr.any {
				rep.addf(fp, "rule %q neither keys nor matches on the method (its key is [%s])", cr.name, cr.keyList())
				ok = false
			}
		default:
			if !slices.Contains(cr.key, f.scope) {
				rep.addf(fp, "rule %q is not keyed on %s (its key is [%s]): the value would key nothing", cr.name, f.scope, cr.keyList())
				ok = false
			}
		}
	}
	if d.Method != "" {
		switch err := validMethodPattern(d.Method); {
		case err != nil:
			rep.add(dp+".method", err.Error())
			ok = false
		case isGlob(d.Method):
			rep.addf(dp+".method", "%q is a glob; a descriptor's method is one method", d.Method)
			ok = false
		case endpoint:
			rep.add(dp+".method", "an entry fills endpoint already: set one or the other")
			ok = false
		case !cr.matches(d.Method):
			rep.addf(dp+".method", "%q does not match rule %q's match.method %q: the rule would never apply", d.Method, cr.name, cr.exact+cr.glob)
			ok = false
		}
	} else if !cr.any && !endpoint {
		rep.addf(dp+".method", "rule %q matches method %q: name the method the descriptor stands for (or fill endpoint)", cr.name, cr.exact+cr.glob)
		ok = false
	}
	for j, s := range cr.key {
		switch s {
		case ScopeHeader:
			if _, has := seen["header:"+cr.keyHeaders[j]]; !has {
				rep.addf(dp+".entries", "no entry fills header:%s, which rule %q is keyed on: the rule would apply to no descriptor", cr.keyHeaders[j], cr.name)
				ok = false
			}
		case ScopeEndpoint:
			if !endpoint && d.Method == "" {
				rep.addf(dp+".entries", "no entry fills endpoint, which rule %q is keyed on (or set method)", cr.name)
				ok = false
			}
		default:
			if _, has := seen[s.String()]; !has {
				rep.addf(dp+".entries", "no entry fills %s, which rule %q is keyed on: the rule would apply to no descriptor", s, cr.name)
				ok = false
			}
		}
	}
	if cr.cond != nil {
		for _, h := range cr.cond.headers {
			if _, has := seen["header:"+h.name]; !has {
				rep.addf(dp+".entries", "no entry fills header:%s, which rule %q matches on: the rule would apply to no descriptor", h.name, cr.name)
				ok = false
			}
		}
		if _, has := seen["tier"]; cr.cond.tiers != nil && !has {
			if _, in := slices.BinarySearch(cr.cond.tiers, p.DefaultTier); !in {
				rep.addf(dp+".entries", "no entry fills tier, and rule %q matches tiers [%s] without the default tier %q: the rule would apply to no descriptor",
					cr.name, strings.Join(cr.cond.tiers, ", "), p.DefaultTier)
				ok = false
			}
		}
	}
	return ok
}

// label names what f fills, as written in As.
func (f rlsFill) label() string {
	switch {
	case f.kind == fillTier:
		return "tier"
	case f.scope == ScopeHeader:
		return "header:" + f.header
	}
	return f.scope.String()
}

// matchesHeader reports whether r matches on header name h.
func (r *cRule) matchesHeader(h string) bool {
	if r.cond == nil {
		return false
	}
	for _, c := range r.cond.headers {
		if c.name == h {
			return true
		}
	}
	return false
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// DescriptorEntry is one entry of a gateway's rate-limit descriptor:
// Envoy's (key, value).
type DescriptorEntry struct {
	Key, Value string
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
)

var matchNames = [...]string{"unknown", "limited", "unlimited", "replaced"}

// String returns "unknown", "limited", "unlimited" or "replaced".
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
// out (len(out) >= len(ds)) receives each descriptor's decision. A
// descriptor no mapping matches, an unlimited one and one replaced by
// another's limit are allowed and charge nothing (Match says which). The
// returned decision is the call's, as AdmitMany's; an unknown domain
// allows everything. Errors are AdmitMany's, and a descriptor with a
// negative Cost or more than MaxDescriptors descriptors deny the call
// without charging anything.
func (l *Limiter) AdmitDescriptors(ctx context.Context, domain string, ds []Descriptor, out []DescriptorDecision) (floodgate.Decision, error) {
	allow := floodgate.Decision{Allowed: true, Stage: floodgate.StageTiers}
	switch {
	case len(out) < len(ds):
		return floodgate.Decision{Stage: floodgate.StageTiers}, fmt.Errorf("tiers: AdmitDescriptors: out has room for %d decisions, want one per descriptor (%d)", len(out), len(ds))
	case len(ds) > MaxDescriptors:
		return floodgate.Decision{Stage: floodgate.StageTiers}, fmt.Errorf("tiers: AdmitDescriptors: %d descriptors; at most %d", len(ds), MaxDescriptors)
	}
	c := l.state.Load()
	var root *rlsNode
	if c.rls != nil {
		root = c.rls.domains[domain]
	}
	for i := range ds {
		out[i] = DescriptorDecision{Decision: allow}
	}
	for i := range ds {
		if ds[i].Cost < 0 {
			return floodgate.Decision{Stage: floodgate.StageTiers}, fmt.Errorf("%w: descriptors[%d] costs %d", ErrInvalidCost, i, ds[i].Cost)
		}
	}
	if root == nil {
		return allow, nil
	}
	sc := l.pool.Get().(*scratch)
	defer l.release(sc)
	if !sc.matchDescriptors(root, ds, out) {
		return allow, nil
	}
	sc.descriptorItems(ds, out)
	sc.dec = grow(sc.dec, len(sc.items))
	d, _, err := l.run(ctx, c, sc, sc.dec, call{})
	for i := range ds {
		if out[i].Match != DescriptorLimited {
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
	return d, err
}

// matchDescriptors looks up each descriptor's target under root (into
// sc.targets), sets its Match and Name in out, and marks the descriptors
// whose limit another one replaces. It reports whether any is limited.
func (sc *scratch) matchDescriptors(root *rlsNode, ds []Descriptor, out []DescriptorDecision) bool {
	sc.targets = grow(sc.targets, len(ds))
	targets := sc.targets
	replacing := false
	for i := range ds {
		t := root.lookup(ds[i].Entries)
		targets[i] = t
		if t == nil {
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
	for i := range ds {
		t := targets[i]
		if t == nil || out[i].Match != DescriptorLimited {
			continue
		}
		for j := range ds {
			if !replacing {
				break
			}
			if tj := targets[j]; tj != nil && slices.Contains(tj.replaces, t.name) {
				out[i].Match = DescriptorReplaced
				break
			}
		}
		limited = limited || out[i].Match == DescriptorLimited
	}
	return limited
}

// descriptorItems builds, for each limited descriptor, its request (in
// sc.req, headers in sc.hdrs, both sized first so the pointers taken into
// them stay valid) and the engine's item limited to its rule (sc.items;
// sc.idx maps a descriptor to its item).
func (sc *scratch) descriptorItems(ds []Descriptor, out []DescriptorDecision) {
	nreq, nhdr := 0, 0
	for i := range ds {
		if out[i].Match == DescriptorLimited {
			nreq++
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
		if out[i].Match != DescriptorLimited {
			continue
		}
		t := sc.targets[i]
		r := &sc.req[len(sc.items)]
		*r = floodgate.Request{Method: t.method, Cost: ds[i].Cost}
		h0 := len(sc.hdrs)
		for _, f := range t.fills {
			v := ds[i].Entries[f.entry].Value
			switch {
			case f.kind == fillTier:
				r.Tier = v
			case f.scope == ScopeHeader:
				if v != "" {
					sc.hdrs = append(sc.hdrs, floodgate.Header{Name: f.header, Value: v})
				}
			default:
				t.fill(r, f.scope, v)
			}
		}
		if len(sc.hdrs) > h0 {
			r.Headers = sc.hdrs[h0:len(sc.hdrs):len(sc.hdrs)]
		}
		sc.idx[i] = int32(len(sc.items))
		sc.items = append(sc.items, callItem{req: r, rule: t.ruleIdx, peek: ds[i].Peek})
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
