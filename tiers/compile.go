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
	"github.com/floodgate-go/floodgate/internal/syntax"
	"github.com/floodgate-go/floodgate/quota"
)

// compiled is a validated Policy in the form the decision engine uses.
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
	// shaping: a rule settles or waits.
	shaping bool
	// meterEst: a rule charges a named meter and has no cost of its own,
	// so a single request's Admit reads the meters' estimates (what was
	// reported with floodgate.ReportMeter before admission).
	meterEst bool
	// rls is the compiled rls: section and the rules by name.
	rls *rlsCompiled
	// byMethod and others index rules by method (index).
	byMethod map[string][]int32
	others   []int32
	// byName finds a rule by its name (AppendPrincipal).
	byName map[string]int32
}

type tierLimit struct {
	limit  quota.Limit
	suffix string // ":" + algorithm, and ":" + period for a limit with several windows
	// more are the windows after the first of a limit with several
	// (Window); nil for one window.
	more []tierLimit
}

type cRule struct {
	name  string
	index int // position in Policy.Rules
	line  int // Rule.line: 0 when built in Go
	// missing is Rule.WhenMissing: missingDefault, missingSkip or
	// missingDeny.
	missing uint8
	exact   string
	glob    string
	any     bool
	key     []Scope
	limit   tierLimit
	byTier  bool
	cost    int64
	hide    bool
	shadow  bool
	soft    bool // Rule.Soft, in a policy that is not a shadow one
	cache   bool
	fail    quota.FailMode
	mode    quota.Consistency
	shape   shaping       // settle, max_wait
	sync    time.Duration // Async only
	noKey   string        // no-key rules: "<prefix>{<rule>}"
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
	// cal is the rule's calendar rate (its windows' spans); nil: none.
	cal *calendar
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
// information from a YAML decode; nil means a Go-built policy. Each step
// reports what is wrong to rep and goes on, so one load names every
// error, in the order of the policy's sections.
func compile(p *Policy, prefix string, rep *reporter) (*compiled, error) {
	if rep == nil {
		rep = &reporter{}
	}
	if p == nil {
		rep.add("", "policy is nil")
		return nil, rep.err()
	}
	c := &compiled{policy: p, tiers: make(map[string]tierLimit, len(p.Tiers)), methods: make(map[string]floodgate.MethodOptions, len(p.Methods))}
	c.shadow = p.Shadow
	rc := &ruleCompiler{rep: rep, p: p, c: c, prefix: prefix, hdrNames: map[string]struct{}{}, names: make(map[string]int, len(p.Rules)), needTier: -1}
	rc.tierNames = compileTiers(rep, p, c)
	rules := rc.rules()
	rc.defaultTier()
	byName := make(map[string]*cRule, len(rules))
	for i := range rules {
		byName[rules[i].name] = &rules[i]
	}
	rc.overrides(byName)
	for i := range rules {
		rc.finishRule(&rules[i])
	}
	for n := range rc.hdrNames {
		c.headers = append(c.headers, n)
	}
	slices.Sort(c.headers)
	c.exempt = netList(rep, "exempt", p.Exempt)
	c.deny = netList(rep, "deny", p.Deny)
	compileMethods(rep, p, c, rules)
	compileRLS(rep, p, byName, c) // the rls: section
	c.rls.own.prefix = prefix
	if err := rep.err(); err != nil {
		return nil, err
	}
	for i := range rules {
		constKeys(c, &rules[i])
	}
	// Most specific first: more key scopes first, then policy order.
	sort.SliceStable(rules, func(i, j int) bool { return len(rules[i].key) > len(rules[j].key) })
	c.rules = rules
	c.rls.bind(c.rules) // rule indices after the sort
	c.index()
	return c, nil
}

// index files the rules by the method they match, so that a request
// looks at the rules its method can match, not the whole list: byMethod
// holds the rules of one exact method, others the rules with a glob or
// no method, each in rule order (most specific first). byName files
// them by name.
func (c *compiled) index() {
	c.byMethod = make(map[string][]int32)
	c.byName = make(map[string]int32, len(c.rules))
	for i := range c.rules {
		c.byName[c.rules[i].name] = int32(i)
		if r := &c.rules[i]; !r.any && r.glob == "" {
			c.byMethod[r.exact] = append(c.byMethod[r.exact], int32(i))
		} else {
			c.others = append(c.others, int32(i))
		}
	}
}

// compileTiers compiles p.Tiers into c.tiers, in name order so errors
// come out deterministically, and returns the names in that order.
func compileTiers(rep *reporter, p *Policy, c *compiled) []string {
	tierNames := make([]string, 0, len(p.Tiers))
	for n := range p.Tiers {
		tierNames = append(tierNames, n)
	}
	sort.Strings(tierNames)
	for _, n := range tierNames {
		t := p.Tiers[n]
		tp := "tiers." + n
		if !syntax.Name(n) {
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
	return tierNames
}

// finishRule orders r's CIDR overrides, longest prefix first (the sort is
// stable, so policy order breaks ties), and names the windows of every
// limit with several that the rule can meet.
func (rc *ruleCompiler) finishRule(r *cRule) {
	slices.SortStableFunc(r.cidrs, func(a, b cidrOverride) int { return b.net.Bits() - a.net.Bits() })
	if r.byTier {
		for _, n := range rc.tierNames {
			if t, has := rc.c.tiers[n]; has {
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

// constKeys prebuilds the keys of a rule without key: one, or one per
// tier and one for the default tier for a rule with rate "tier".
func constKeys(c *compiled, r *cRule) {
	if len(r.key) != 0 {
		return
	}
	if !r.byTier {
		r.constKey = r.noKey + r.limit.suffix
		return
	}
	r.tierKeys = make(map[string]string, len(c.tiers))
	for n, t := range c.tiers {
		r.tierKeys[n] = r.noKey + t.suffix
	}
	r.defaultKey = r.noKey + c.defaultTier.suffix
}

// compileMethods checks p.Methods, in name order, into c.methods: exact
// methods, valid priorities, and costs that every rule the method matches
// can hold.
func compileMethods(rep *reporter, p *Policy, c *compiled, rules []cRule) {
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
			ok = methodCostFits(rep, mp, c, rules, m, mo.Cost)
		}
		if ok {
			c.methods[m] = mo
		}
	}
}

// methodCostFits reports whether cost fits every capacity a request to
// method m meets at the rules without a cost of their own that match it.
func methodCostFits(rep *reporter, mp string, c *compiled, rules []cRule, m string, cost int64) bool {
	ok := true
	for i := range rules {
		r := &rules[i]
		if r.cost > 0 || r.shape.meter != "" || !r.matches(m) { // a meter rule's cost is never Request.Cost
			continue
		}
		for _, tl := range capacities(c, r) {
			if cost > tl.cap {
				rep.addf(mp+".cost", "%d exceeds the capacity %d of rule %q%s: such a request could never pass", cost, tl.cap, r.name, tl.what)
				ok = false
			}
		}
	}
	return ok
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
		norm, err := syntax.CheckNet(n)
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
