package tiers

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate/quota"
)

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
	noLimit   bool
	deny      *RLSDeny
	replaces  []string
	fills     []rlsFill
	// valued: every entry's value is fixed (no wildcard) or fills
	// something.
	valued bool
	// share, when not 0, is the period of the rule's one fixed window,
	// set by bind when every entry's value keys the rule's bucket: a
	// descriptor with these entries and a limit of its own of this
	// period is charged at the rule's bucket, as envoyproxy/ratelimit
	// counts an override in the configured limit's counter.
	share time.Duration
	// ip4, ip6 are the rule's ip prefix lengths: a network value no
	// wider than them keys the bucket of its address.
	ip4, ip6 int
}

type rlsKV struct{ key, value string }

// rlsNode is a node of a domain's lookup tree: its children by key and
// value, by key and value prefix (wildcards, in the order listed), and by
// key alone (any value), and the target of a descriptor that ends here.
type rlsNode struct {
	byValue map[rlsKV]*rlsNode
	wild    []rlsWild
	byKey   map[string]*rlsNode
	target  *rlsTarget
}

// rlsWild is the child of a node for a wildcard value: key, and the
// prefix values must start with.
type rlsWild struct {
	key, prefix string
	next        *rlsNode
}

// wildcard returns the prefix of a wildcard value ("foo*": "foo").
func wildcard(v string) (string, bool) {
	return strings.CutSuffix(v, "*")
}

// rlsCompiled is the compiled rls: section, and the rules by name.
type rlsCompiled struct {
	domains   map[string]*rlsNode
	targets   []*rlsTarget
	ruleIndex map[string]int32
	// own is the rule, in no rule list, that the buckets of descriptors'
	// own limits (Descriptor.Limit) are decided as.
	own cRule
	// quota holds, per domain with quota: true, the key order of its
	// descriptors by key set (see QuotaBuckets).
	quota map[string]map[string][]string
}

// compileRLS checks p.RLS against the policy's rules (byName, before the
// rules are sorted) and stores its lookup trees in c.rls. Errors go to
// rep.
func compileRLS(rep *reporter, p *Policy, byName map[string]*cRule, c *compiled) {
	rc := &rlsCompiled{own: cRule{name: PolicyDescriptorLimit, index: -1, shadow: p.Shadow}}
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
		if dom.Quota {
			rc.compileQuota(rep, dp, dom, byName)
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
		if !t.unlimited && !t.noLimit {
			t.ruleIdx = rc.ruleIndex[t.rule]
		}
		if t.unlimited || t.noLimit || t.deny != nil {
			continue
		}
		if r := &rules[t.ruleIdx]; t.sharable(r, &rc.own) {
			t.share = r.limit.limit.Period
		}
	}
}

// sharable reports whether a descriptor of t's entries with a limit of
// its own may be charged at the bucket of t's rule r: r has one fixed
// window and no tier rate, cost, shadow, roll-out, shaping or consistency
// that an own limit lacks, and every entry's value is fixed or keys r's bucket.
func (t *rlsTarget) sharable(r, own *cRule) bool {
	l := &r.limit
	if !t.valued || r.byTier || l.more != nil || l.limit.Algorithm != quota.FixedWindow || r.cost != 0 ||
		r.shadow != own.shadow || r.rollout != 0 || r.shape.settle || r.shape.maxWait != 0 || r.mode != own.mode {
		return false
	}
	for _, f := range t.fills {
		switch {
		case f.kind != fillScope:
			return false
		case f.scope == ScopeHeader && !slices.Contains(r.keyHeaders, f.header):
			return false
		case f.scope != ScopeHeader && !slices.Contains(r.key, f.scope):
			return false
		}
	}
	return true
}

// insert adds a descriptor shape ending at t; it returns the target
// already there, if any, and adds nothing then.
func (n *rlsNode) insert(entries []RLSEntry, t *rlsTarget) *rlsTarget {
	for _, e := range entries {
		var next *rlsNode
		if prefix, ok := wildcard(e.Value); ok {
			for _, w := range n.wild {
				if w.key == e.Key && w.prefix == prefix {
					next = w.next
				}
			}
			if next == nil {
				next = &rlsNode{}
				n.wild = append(n.wild, rlsWild{key: e.Key, prefix: prefix, next: next})
			}
		} else if e.Value != "" {
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
		for i := 0; next == nil && i < len(n.wild); i++ {
			if w := &n.wild[i]; w.key == e.Key && strings.HasPrefix(e.Value, w.prefix) {
				next = w.next
			}
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
	sc, err := parseScope(s)
	if err != nil {
		return rlsFill{}, fmt.Errorf("unknown %q (want ip, user, tenant, api_key, endpoint, header:<name> or tier)", s)
	}
	return rlsFill{kind: fillScope, scope: sc}, nil
}

// compileTarget checks one RLSDescriptor at path dp; nil when it is
// unusable (its errors are reported).
func compileTarget(rep *reporter, dp string, d *RLSDescriptor, p *Policy, byName map[string]*cRule) *rlsTarget {
	ok := true
	t := &rlsTarget{path: dp, rule: d.Rule, name: d.Name, method: d.Method, unlimited: d.Unlimited, noLimit: d.NoLimit, replaces: slices.Clone(d.Replaces)}
	if d.Deny != nil {
		deny := *d.Deny
		t.deny = &deny
	}
	free := d.Unlimited || d.NoLimit || d.Deny != nil // charges nothing: its values fill nothing
	t.valued = true
	switch {
	case len(d.Entries) == 0:
		rep.add(dp+".entries", "list at least one entry")
		ok = false
	case len(d.Entries) > maxRLSEntries:
		rep.addf(dp+".entries", "%d entries; at most %d", len(d.Entries), maxRLSEntries)
		ok = false
	}
	if !compileEntries(rep, dp, d, t, free) {
		ok = false
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
	if d.Deny != nil {
		switch {
		case d.Unlimited || d.NoLimit || d.Rule != "" || d.Method != "":
			rep.add(dp+".deny", "a deny descriptor is not unlimited or no_limit and names no rule or method")
			ok = false
		case d.Name == "":
			rep.add(dp+".name", "required for a deny descriptor: the name of its limit of 0")
			ok = false
		case slices.Contains(d.Replaces, d.Name):
			rep.add(dp+".replaces", "a limit cannot replace itself")
			ok = false
		}
		if d.Deny.Window <= 0 {
			rep.addf(dp+".deny.window", "%s: want a positive duration such as 1m", d.Deny.Window)
			ok = false
		}
		if !ok {
			return nil
		}
		return t
	}
	if d.NoLimit {
		if d.Unlimited || d.Rule != "" || d.Method != "" || d.Name != "" || len(d.Replaces) > 0 {
			rep.add(dp+".no_limit", "a no_limit descriptor has no limit: it is not unlimited and names no rule, method, name or replaces")
			return nil
		}
		if !ok {
			return nil
		}
		return t
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

// compileEntries checks a descriptor's entries and records in t what
// their values fill; free is a descriptor that charges nothing (unlimited,
// no_limit, deny), whose values fill nothing. It reports whether every
// entry is usable (its errors are reported).
func compileEntries(rep *reporter, dp string, d *RLSDescriptor, t *rlsTarget, free bool) bool {
	ok := true
	for k, e := range d.Entries {
		ep := dp + ".entries[" + strconv.Itoa(k) + "]"
		if e.Key == "" {
			rep.add(ep+".key", "required")
			ok = false
		}
		_, wild := wildcard(e.Value)
		t.valued = t.valued && (e.As != "" || e.Value != "" && !wild)
		switch {
		case e.Value != "" && e.As != "" && !wild:
			rep.add(ep, "set value (the value it must have) or as (what its value fills), not both; a wildcard value (foo*) may have both")
			ok = false
		case e.Value == "" && e.As == "" && !free:
			rep.add(ep, "matches any value but keys none: envoyproxy/ratelimit counts each value apart; say what the value fills with as (ip, user, tenant, api_key, endpoint, header:<name>, tier), or match a fixed value")
			ok = false
		case e.As != "" && free:
			rep.add(ep+".as", "an unlimited, no_limit or deny descriptor charges nothing, so its values fill nothing: remove as")
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
	return ok
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
