package tiers

import (
	"net/netip"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
)

// compiled is a validated Policy in the form Admit uses.
type compiled struct {
	policy  *Policy
	rules   []cRule // most specific first
	methods map[string]floodgate.MethodOptions
	// tiers by name, and the default tier, for rate "tier" rules.
	tiers       map[string]tierLimit
	defaultTier tierLimit
	// exempt and deny are the policy's address lists; nil when empty.
	exempt, deny *netSet
	// headers are the header names the policy matches or keys on, sorted
	// (Limiter.RequestHeaders).
	headers []string
	// shadow: the whole policy is a dry run (Policy.Shadow).
	shadow bool
	// shaping: a rule settles or waits (issue 18; shaping.go).
	shaping bool
	// rls is the compiled rls: section and the rules by name (issue 20;
	// rls.go).
	rls *rlsCompiled
}

type tierLimit struct {
	limit  quota.Limit
	suffix string // ":" + algorithm, and ":" + period for a limit with several windows
	// more are the windows after the first of a limit with several
	// (Window); nil for one window.
	more []tierLimit
}

type cRule struct {
	name   string
	index  int // position in Policy.Rules
	exact  string
	glob   string
	any    bool
	key    []Scope
	limit  tierLimit
	byTier bool
	cost   int64
	hide   bool
	shadow bool
	cache  bool
	fail   quota.FailMode
	mode   quota.Consistency
	shape  shaping       // settle, max_wait (shaping.go)
	sync   time.Duration // Async only
	noKey  string        // no-key rules: "<prefix>{<rule>}"
	// Full keys of no-key rules, prebuilt: fixed rules use constKey, tier
	// rules tierKeys (by tier name) or defaultKey.
	constKey   string
	tierKeys   map[string]string
	defaultKey string
	prefix     string
	head       string // keyed rules: prefix + "{" + scope0 + "="
	mid        string // "}:" + rule name
	// scopeLabels[0] = "scope0=", scopeLabels[i>0] = ":scopeI="
	scopeLabels []string
	// overrides keyed by the key body "{scope0=v0}:rule[:scopeI=vI]..."
	overrides map[string]tierLimit
	// cidrs are the overrides whose ip value is a network wider than one
	// bucket, longest prefix first, then policy order.
	cidrs []cidrOverride
	// v4bits and v6bits are the prefix lengths of the ip scope's buckets.
	v4bits, v6bits int
	// cond is what the rule matches beyond the method; nil: nothing.
	cond *cond
	// keyHeaders[j] is the header name of key scope j when it is
	// ScopeHeader; nil when the key has no header scope.
	keyHeaders []string
	// winNames name the windows of the limits with several that the rule
	// can meet (policyName).
	winNames []windowName
	// rollout is Rule.EnforcePercent when in [1, 99]; 0: always enforced.
	rollout uint8
}

// cidrOverride is an override that applies to every bucket whose address
// is inside net and whose other scopes have the given values.
type cidrOverride struct {
	net   netip.Prefix
	vals  []string // by key position: the other scopes' raw values
	limit tierLimit
}

// matchCIDR returns the limit of the first CIDR override of r that
// matches the request, or nil.
func (r *cRule) matchCIDR(req *floodgate.Request) *tierLimit {
	ip := normIP(req.Identity.IP)
	for i := range r.cidrs {
		o := &r.cidrs[i]
		if !o.net.Contains(ip) {
			continue
		}
		match := true
		for j, s := range r.key {
			if s == ScopeIP {
				continue
			}
			if v, _ := r.component(j, req); v != o.vals[j] {
				match = false
				break
			}
		}
		if match {
			return &o.limit
		}
	}
	return nil
}

func (r *cRule) matches(method string) bool {
	switch {
	case r.any:
		return true
	case r.glob != "":
		ok, _ := path.Match(r.glob, method)
		return ok
	}
	return r.exact == method
}

func suffixOf(a quota.Algorithm) string { return ":" + a.String() }

// compile validates p and builds its compiled form. rep may carry line
// information from a YAML decode; nil means a Go-built policy.
func compile(p *Policy, prefix string, rep *reporter) (*compiled, error) {
	if rep == nil {
		rep = &reporter{}
	}
	if p == nil {
		rep.add("", "policy is nil")
		return nil, rep.err()
	}
	c := &compiled{policy: p, tiers: make(map[string]tierLimit, len(p.Tiers)), methods: make(map[string]floodgate.MethodOptions, len(p.Methods))}

	// Tiers, in name order so errors come out deterministically.
	tierNames := make([]string, 0, len(p.Tiers))
	for n := range p.Tiers {
		tierNames = append(tierNames, n)
	}
	sort.Strings(tierNames)
	for _, n := range tierNames {
		t := p.Tiers[n]
		tp := "tiers." + n
		if !validName(n) {
			tp = "tiers[" + strconv.Quote(n) + "]"
			rep.addf(tp, "tier name %q must match [A-Za-z0-9_.-]+", n)
			continue
		}
		if t.Rate.Tier {
			rep.add(tp+".rate", `a tier's rate cannot be "tier"`)
			continue
		}
		if t.Rate == (Rate{}) && len(t.Windows) == 0 {
			rep.add(tp+".rate", "required")
			continue
		}
		if tl, ok := limitsOf(rep, tp, t.Rate, t.Burst, t.Windows, t.Algorithm); ok {
			c.tiers[n] = tl
		}
	}

	c.shadow = p.Shadow
	hdrNames := map[string]struct{}{}
	needTier := -1
	names := make(map[string]int, len(p.Rules))
	byName := make(map[string]*cRule, len(p.Rules))
	rules := make([]cRule, 0, len(p.Rules))
	for i := range p.Rules {
		r := &p.Rules[i]
		rp := "rules[" + strconv.Itoa(i) + "]"
		ok := true
		if !validName(r.Name) {
			if r.Name == "" {
				rep.add(rp+".name", "required")
			} else {
				rep.addf(rp+".name", "%q must match [A-Za-z0-9_.-]+", r.Name)
			}
			ok = false
		} else if j, dup := names[r.Name]; dup {
			rep.addf(rp+".name", "%q is already the name of rules[%d]", r.Name, j)
			ok = false
		} else if r.Name == PolicyExempt || r.Name == PolicyDeny {
			rep.addf(rp+".name", "%q is reserved: it names the decisions of the policy's %s list", r.Name, r.Name)
			ok = false
		} else {
			names[r.Name] = i
		}
		cr := cRule{name: r.Name, index: i, cost: r.Cost, hide: r.HideQuota, shadow: r.Shadow || p.Shadow, cache: r.CacheDenials, fail: r.OnStoreError, mode: r.Consistency}
		switch {
		case r.EnforcePercent < 0 || r.EnforcePercent > 100:
			rep.addf(rp+".enforce_percent", "%d is out of range [1, 100]", r.EnforcePercent)
			ok = false
		case r.EnforcePercent != 0 && r.EnforcePercent != 100 && r.Shadow:
			rep.add(rp+".enforce_percent", "a shadow rule enforces nothing: remove shadow or enforce_percent")
			ok = false
		case r.EnforcePercent != 0 && r.EnforcePercent != 100:
			cr.rollout = uint8(r.EnforcePercent)
		}
		if co, cok := compileCond(rep, rp, &r.Match, p, hdrNames); cok {
			cr.cond = co
		} else {
			ok = false
		}
		switch {
		case r.Consistency > quota.Async:
			rep.addf(rp+".consistency", "unknown consistency %d", r.Consistency)
			ok = false
		case r.Consistency != quota.Async && r.SyncInterval != 0:
			rep.addf(rp+".sync_interval", "is only for consistency async (the rule is %s)", r.Consistency)
			ok = false
		case r.Consistency == quota.Async && r.SyncInterval == 0:
			cr.sync = DefaultSyncInterval
		case r.Consistency == quota.Async && (r.SyncInterval < MinSyncInterval || r.SyncInterval > MaxSyncInterval):
			rep.addf(rp+".sync_interval", "%s is out of range [%s, %s]", r.SyncInterval, MinSyncInterval, MaxSyncInterval)
			ok = false
		default:
			cr.sync = r.SyncInterval
		}
		if r.Consistency != quota.Exact {
			if r.Rate.Tier {
				for _, n := range tierNames {
					if t, has := c.tiers[n]; has && !t.limit.Algorithm.CanBookAhead() {
						rep.addf(rp+".consistency", "%s needs token_bucket or gcra, but tier %q uses %s", r.Consistency, n, t.limit.Algorithm)
						ok = false
					}
				}
			} else if !r.Algorithm.CanBookAhead() {
				rep.addf(rp+".consistency", "%s needs token_bucket or gcra, not %s", r.Consistency, r.Algorithm)
				ok = false
			}
		}
		if !compileShaping(rep, rp, r, &cr, c, tierNames) { // issue 18: settle, max_wait (shaping.go)
			ok = false
		}
		if r.Match.Method == "" {
			cr.any = true
		} else if err := validMethodPattern(r.Match.Method); err != nil {
			rep.add(rp+".match.method", err.Error())
			ok = false
		} else if isGlob(r.Match.Method) {
			cr.glob = r.Match.Method
		} else {
			cr.exact = r.Match.Method
		}
		seen := 0
		if !keyHeaders(rep, rp, r, &cr, hdrNames) {
			ok = false
		}
		for j, s := range r.Key {
			if !s.valid() {
				rep.addf(rp+".key["+strconv.Itoa(j)+"]", "unknown scope %d", s)
				ok = false
				continue
			}
			if s == ScopeHeader {
				continue // names checked by keyHeaders
			}
			if seen&(1<<s) != 0 {
				rep.addf(rp+".key["+strconv.Itoa(j)+"]", "scope %q is repeated", s.String())
				ok = false
				continue
			}
			seen |= 1 << s
		}
		cr.key = slices.Clone(r.Key)
		hasIP := slices.Contains(r.Key, ScopeIP)
		cr.v4bits, cr.v6bits = defaultIPv4Prefix, defaultIPv6Prefix
		for _, pf := range [...]struct {
			field string
			v     int
			max   int
			dst   *int
		}{{"ipv4_prefix", r.IPv4Prefix, 32, &cr.v4bits}, {"ipv6_prefix", r.IPv6Prefix, 128, &cr.v6bits}} {
			switch {
			case pf.v == 0:
			case !hasIP:
				rep.addf(rp+"."+pf.field, "is only for rules whose key has ip (the key is [%s])", scopeList(r.Key))
				ok = false
			case pf.v < 1 || pf.v > pf.max:
				rep.addf(rp+"."+pf.field, "%d is out of range [1, %d]", pf.v, pf.max)
				ok = false
			default:
				*pf.dst = pf.v
			}
		}
		if r.OnStoreError > quota.FailClosed {
			rep.addf(rp+".on_store_error", "unknown fail mode %d", r.OnStoreError)
			ok = false
		}
		if r.Cost < 0 {
			rep.addf(rp+".cost", "%d must be at least 1", r.Cost)
			ok = false
		}
		if r.Rate.Tier {
			cr.byTier = true
			if needTier < 0 {
				needTier = i
			}
			if r.Burst != 0 {
				rep.add(rp+".burst", `must not be set when rate is "tier" (the tier sets it)`)
				ok = false
			}
			if len(r.Windows) != 0 {
				rep.add(rp+".rate", `"tier" is one rate: give the tiers several windows instead`)
				ok = false
			}
			if r.Algorithm != quota.TokenBucket {
				rep.add(rp+".algorithm", `must not be set when rate is "tier" (the tier sets it)`)
				ok = false
			}
			if r.Cost > 0 {
				for _, n := range tierNames {
					if t, has := c.tiers[n]; has && r.Cost > t.minCapacity() {
						rep.addf(rp+".cost", "%d exceeds the capacity %d of tier %q: such a request could never pass", r.Cost, t.minCapacity(), n)
						ok = false
					}
				}
			}
		} else if r.Rate == (Rate{}) && len(r.Windows) == 0 {
			rep.add(rp+".rate", "required")
			ok = false
		} else if tl, lok := limitsOf(rep, rp, r.Rate, r.Burst, r.Windows, r.Algorithm); !lok {
			ok = false
		} else {
			cr.limit = tl
			for _, w := range append([]tierLimit{tl}, tl.more...) {
				if l := w.limit; r.Cost > l.Capacity() {
					rep.addf(rp+".cost", "%d exceeds the rule's capacity %d (%s): such a request could never pass", r.Cost, l.Capacity(), capacityWhat(l))
					ok = false
				}
			}
		}
		if !ok {
			continue
		}
		cr.prefix = prefix
		if len(cr.key) == 0 {
			cr.noKey = prefix + "{" + r.Name + "}"
		} else {
			cr.mid = "}:" + r.Name
			cr.scopeLabels = make([]string, len(cr.key))
			for j, s := range cr.key {
				label := s.String()
				if s == ScopeHeader {
					label += "." + cr.keyHeaders[j] // "header.x-region"
				}
				if j == 0 {
					cr.scopeLabels[j] = label + "="
				} else {
					cr.scopeLabels[j] = ":" + label + "="
				}
			}
			cr.head = prefix + "{" + cr.scopeLabels[0]
		}
		rules = append(rules, cr)
	}
	if needTier >= 0 {
		switch {
		case p.DefaultTier == "":
			rep.add("rules["+strconv.Itoa(needTier)+"].rate", `"tier" needs default_tier, which is not set`)
		default:
			if t, ok := c.tiers[p.DefaultTier]; ok {
				c.defaultTier = t
			} else if _, declared := p.Tiers[p.DefaultTier]; !declared {
				rep.addf("default_tier", "%q is not one of the tiers", p.DefaultTier)
			}
		}
	} else if p.DefaultTier != "" {
		if _, declared := p.Tiers[p.DefaultTier]; !declared {
			rep.addf("default_tier", "%q is not one of the tiers", p.DefaultTier)
		}
	}
	for i := range rules {
		byName[rules[i].name] = &rules[i]
	}

	// Overrides.
	kb := newKeyBuilder()
	for i := range p.Overrides {
		o := &p.Overrides[i]
		op := "overrides[" + strconv.Itoa(i) + "]"
		r, ok := byName[o.Rule]
		if !ok {
			if o.Rule == "" {
				rep.add(op+".rule", "required")
			} else if _, exists := names[o.Rule]; !exists {
				rep.addf(op+".rule", "no rule is named %q", o.Rule)
			}
			continue
		}
		if len(r.key) == 0 {
			rep.addf(op+".rule", "rule %q has no key; change its rate instead", o.Rule)
			continue
		}
		oh, herr := overrideHeaders(o.KeyHeaders)
		if herr != "" {
			rep.add(op+".key", herr)
			continue
		}
		if !sameScopes(r.key, o.Key) || !sameHeaders(r.keyHeaders, oh) {
			rep.addf(op+".key", "scopes [%s] do not match rule %q key [%s]", overrideKeyList(o.Key, oh), o.Rule, r.keyList())
			continue
		}
		if o.Rate.Tier {
			rep.add(op+".rate", `an override's rate cannot be "tier"`)
			continue
		}
		if o.Rate == (Rate{}) && len(o.Windows) == 0 {
			rep.add(op+".rate", "required")
			continue
		}
		alg := quota.TokenBucket
		switch {
		case o.Algorithm != nil:
			alg = *o.Algorithm
		case !r.byTier:
			alg = r.limit.limit.Algorithm
		}
		otl, lok := limitsOf(rep, op, o.Rate, o.Burst, o.Windows, alg)
		if !lok {
			continue
		}
		l := otl.limit
		if r.mode != quota.Exact && !alg.CanBookAhead() {
			rep.addf(op+".algorithm", "rule %q is %s, which needs token_bucket or gcra, not %s", o.Rule, r.mode, alg)
			continue
		}
		if r.shape.maxWait > 0 && !alg.CanBookAhead() { // issue 18: max_wait (shaping.go)
			rep.addf(op+".algorithm", "rule %q has max_wait, which needs token_bucket or gcra (they book units ahead), not %s", o.Rule, alg)
			continue
		}
		if r.cost > otl.minCapacity() {
			for _, w := range append([]tierLimit{otl}, otl.more...) {
				if r.cost > w.limit.Capacity() {
					l = w.limit
					break
				}
			}
			rep.addf(op+".rate", "capacity %d (%s) is less than rule %q cost %d: such a request could never pass", l.Capacity(), capacityWhat(l), o.Rule, r.cost)
			continue
		}
		req := floodgate.Request{}
		id := &req.Identity
		bad := false
		var (
			ipNet     netip.Prefix
			wide      bool
			otherVals = make([]string, len(r.key))
		)
		for j, s := range r.key {
			if s == ScopeHeader {
				v := oh[r.keyHeaders[j]]
				if v == "" {
					rep.add(op+".key.header:"+r.keyHeaders[j], "must not be empty")
					bad = true
					continue
				}
				otherVals[j] = v
				req.Headers = append(req.Headers, floodgate.Header{Name: r.keyHeaders[j], Value: v})
				continue
			}
			if s == ScopeIP {
				n, err := parseNet(o.Key[s])
				if err != nil {
					rep.add(op+".key.ip", err.Error())
					bad = true
					continue
				}
				field, bucket := "ipv6_prefix", r.v6bits
				if n.Addr().Is4() {
					field, bucket = "ipv4_prefix", r.v4bits
				}
				if n.Bits() > bucket {
					whole, _ := n.Addr().Prefix(bucket)
					rep.addf(op+".key.ip", "%s is narrower than rule %q's buckets (%s %d): every address of one /%d shares one bucket and one limit; name %s or a wider network",
						o.Key[s], o.Rule, field, bucket, bucket, whole)
					bad = true
					continue
				}
				ipNet, wide = n, n.Bits() < bucket
				id.IP = n.Addr()
				continue
			}
			v, err := keyValue(o.Key[s])
			if err != nil {
				rep.add(op+".key."+s.String(), err.Error())
				bad = true
				continue
			}
			otherVals[j] = v
			switch s {
			case ScopeEndpoint:
				req.Method = v
			case ScopeUser:
				id.User = v
			case ScopeAPIKey:
				id.APIKey = v
			case ScopeTenant:
				id.Tenant = v
			}
		}
		if bad {
			continue
		}
		if wide {
			dup := false
			for j := range r.cidrs {
				if r.cidrs[j].net == ipNet && slices.Equal(r.cidrs[j].vals, otherVals) {
					dup = true
				}
			}
			if dup {
				rep.addf(op+".key", "rule %q already has an override for this key", o.Rule)
				continue
			}
			r.cidrs = append(r.cidrs, cidrOverride{net: ipNet, vals: otherVals, limit: otl})
			continue
		}
		body, _ := kb.appendKeyBody(nil, r, &req)
		if r.overrides == nil {
			r.overrides = make(map[string]tierLimit)
		}
		if _, dup := r.overrides[string(body)]; dup {
			rep.addf(op+".key", "rule %q already has an override for this key", o.Rule)
			continue
		}
		r.overrides[string(body)] = otl
	}

	for i := range rules {
		r := &rules[i]
		// Longest prefix first; the sort is stable, so policy order
		// breaks ties.
		slices.SortStableFunc(r.cidrs, func(a, b cidrOverride) int { return b.net.Bits() - a.net.Bits() })
		// Name the windows of every limit with several the rule can meet.
		if r.byTier {
			for _, n := range tierNames {
				if t, has := c.tiers[n]; has {
					r.nameWindows(&t)
				}
			}
		} else {
			r.nameWindows(&r.limit)
		}
		for _, o := range r.overrides {
			r.nameWindows(&o)
		}
		for j := range r.cidrs {
			r.nameWindows(&r.cidrs[j].limit)
		}
		slices.SortFunc(r.winNames, func(a, b windowName) int { return int(a.period - b.period) })
	}
	for n := range hdrNames {
		c.headers = append(c.headers, n)
	}
	slices.Sort(c.headers)

	// Address lists.
	c.exempt = netList(rep, "exempt", p.Exempt)
	c.deny = netList(rep, "deny", p.Deny)

	// Methods.
	mnames := make([]string, 0, len(p.Methods))
	for m := range p.Methods {
		mnames = append(mnames, m)
	}
	sort.Strings(mnames)
	for _, m := range mnames {
		mo := p.Methods[m]
		mp := "methods[" + strconv.Quote(m) + "]"
		ok := true
		if err := validMethodPattern(m); err != nil {
			rep.add(mp, err.Error())
			ok = false
		} else if isGlob(m) {
			rep.addf(mp, "%q is a glob; methods are exact", m)
			ok = false
		}
		if mo.Cost < 0 {
			rep.addf(mp+".cost", "%d must be at least 1", mo.Cost)
			ok = false
		}
		if !mo.Priority.Valid() {
			rep.addf(mp+".priority", "invalid priority %d", mo.Priority)
			ok = false
		}
		if ok && mo.Cost > 0 {
			for i := range rules {
				r := &rules[i]
				if r.cost > 0 || !r.matches(m) {
					continue
				}
				for _, tl := range capacities(c, r) {
					if mo.Cost > tl.cap {
						rep.addf(mp+".cost", "%d exceeds the capacity %d of rule %q%s: such a request could never pass", mo.Cost, tl.cap, r.name, tl.what)
						ok = false
					}
				}
			}
		}
		if ok {
			c.methods[m] = mo
		}
	}

	compileRLS(rep, p, byName, c) // issue 20: the rls: section (rls.go)
	checkOverload(rep, p)         // issue 19: the shedder: and concurrency: sections (overload.go)
	if err := rep.err(); err != nil {
		return nil, err
	}
	for i := range rules {
		r := &rules[i]
		if len(r.key) != 0 {
			continue
		}
		if !r.byTier {
			r.constKey = r.noKey + r.limit.suffix
			continue
		}
		r.tierKeys = make(map[string]string, len(c.tiers))
		for n, t := range c.tiers {
			r.tierKeys[n] = r.noKey + t.suffix
		}
		r.defaultKey = r.noKey + c.defaultTier.suffix
	}
	// Most specific first: more key scopes first, then policy order.
	sort.SliceStable(rules, func(i, j int) bool { return len(rules[i].key) > len(rules[j].key) })
	c.rules = rules
	c.rls.bind(c.rules) // issue 20: rule indices after the sort (rls.go)
	// Re-point overrides maps (rules were moved by the sort; maps are references, fine).
	return c, nil
}

type capEntry struct {
	cap  int64
	what string
}

// capacities lists every capacity a request matching r may meet.
func capacities(c *compiled, r *cRule) []capEntry {
	var out []capEntry
	if r.byTier {
		names := make([]string, 0, len(c.tiers))
		for n := range c.tiers {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			t := c.tiers[n]
			out = append(out, capEntry{t.minCapacity(), " in tier " + strconv.Quote(n)})
		}
	} else {
		out = append(out, capEntry{r.limit.minCapacity(), ""})
	}
	for _, o := range r.overrides {
		out = append(out, capEntry{o.minCapacity(), " (override)"})
	}
	for _, o := range r.cidrs {
		out = append(out, capEntry{o.limit.minCapacity(), " (override for " + o.net.String() + ")"})
	}
	return out
}

// netList validates an address list of the policy and builds its set; nil
// when the list is empty or wrong.
func netList(rep *reporter, field string, nets []netip.Prefix) *netSet {
	if len(nets) == 0 {
		return nil
	}
	set := &netSet{}
	for i, n := range nets {
		norm, err := checkNet(n)
		if err != nil {
			rep.add(field+"["+strconv.Itoa(i)+"]", err.Error())
			continue
		}
		set.add(norm)
	}
	if set.empty() {
		return nil
	}
	return set
}

func capacityWhat(l quota.Limit) string {
	if l.Algorithm == quota.TokenBucket || l.Algorithm == quota.GCRA {
		return "burst " + strconv.FormatInt(l.Burst, 10)
	}
	return "rate " + strconv.FormatInt(l.Rate, 10) + " per window"
}

// sameScopes reports whether m gives a value for exactly the scopes of
// key but its header scopes (which an override gives in KeyHeaders).
func sameScopes(key []Scope, m map[Scope]string) bool {
	if _, ok := m[ScopeHeader]; ok {
		return false
	}
	n := 0
	for _, s := range key {
		if s == ScopeHeader {
			continue
		}
		if _, ok := m[s]; !ok {
			return false
		}
		n++
	}
	return n == len(m)
}

func keysOf(m map[Scope]string) []Scope {
	out := make([]Scope, 0, len(m))
	for s := range m {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

func scopeList(ss []Scope) string {
	parts := make([]string, len(ss))
	for i, s := range ss {
		parts[i] = s.String()
	}
	return strings.Join(parts, ", ")
}
