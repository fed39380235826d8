package tiers

import (
	"slices"
	"strconv"

	"github.com/floodgate-go/floodgate/internal/syntax"
	"github.com/floodgate-go/floodgate/quota"
)

// ruleCompiler is what compiling the rules and overrides of one policy
// shares: where errors go, the policy and its compiled form so far, the
// key prefix, the tier names in order, the header names the policy matches
// or keys on, the index of each rule name, and the first rule with rate
// "tier" (-1: none).
type ruleCompiler struct {
	rep       *reporter
	p         *Policy
	c         *compiled
	prefix    string
	tierNames []string
	hdrNames  map[string]struct{}
	names     map[string]int
	needTier  int
}

// rules compiles p.Rules, in policy order, leaving out those with errors.
func (rc *ruleCompiler) rules() []cRule {
	rules := make([]cRule, 0, len(rc.p.Rules))
	for i := range rc.p.Rules {
		if cr, ok := rc.rule(i); ok {
			rules = append(rules, cr)
		}
	}
	return rules
}

// rule compiles rules[i]; it reports false when the rule has errors. Every
// check runs, so every error of the rule is reported.
func (rc *ruleCompiler) rule(i int) (cRule, bool) {
	r := &rc.p.Rules[i]
	rp := "rules[" + strconv.Itoa(i) + "]"
	ok := rc.ruleName(rp, r, i)
	cr := cRule{name: r.Name, index: i, line: r.line, cost: r.Cost, hide: r.HideQuota, shadow: r.Shadow || rc.p.Shadow, cache: r.CacheDenials, fail: r.OnStoreError, mode: r.Consistency}
	ok = rc.rollout(rp, r, &cr) && ok
	ok = rc.soft(rp, r, &cr) && ok
	if co, cok := compileCond(rc.rep, rp, &r.Match, rc.p, rc.hdrNames); cok {
		cr.cond = co
	} else {
		ok = false
	}
	ok = rc.consistency(rp, r, &cr) && ok
	ok = compileShaping(rc.rep, rp, r, &cr, rc.c, rc.tierNames) && ok // settle, max_wait
	ok = rc.methodMatch(rp, r, &cr) && ok
	ok = rc.key(rp, r, &cr) && ok
	ok = rc.whenMissing(rp, r, &cr) && ok
	if r.OnStoreError > quota.FailClosed {
		rc.rep.addf(rp+".on_store_error", "unknown fail mode %d", r.OnStoreError)
		ok = false
	}
	if r.Cost < 0 {
		rc.rep.addf(rp+".cost", "%d must be at least 1", r.Cost)
		ok = false
	}
	cal, cok := rc.compileCalendar(rp, r)
	cr.cal, ok = cal, cok && ok
	if r.Rate.Calendar != NoCalendar {
		plain := *r // the limit of one window; the calendar picks which
		plain.Rate.Calendar = NoCalendar
		r = &plain
	}
	ok = rc.limit(rp, r, i, &cr) && ok
	if !ok {
		return cRule{}, false
	}
	rc.keyParts(&cr)
	return cr, true
}

// What a rule does with a request that lacks a scope of its key
// (cRule.missing, from Rule.WhenMissing).
const (
	missingDefault uint8 = iota // "": skip, and report a scope never filled
	missingSkip                 // "skip"
	missingDeny                 // "deny"
)

// whenMissing checks the rule's when_missing.
func (rc *ruleCompiler) whenMissing(rp string, r *Rule, cr *cRule) bool {
	switch r.WhenMissing {
	case "":
		return true
	case "skip":
		cr.missing = missingSkip
	case "deny":
		cr.missing = missingDeny
	default:
		rc.rep.addf(rp+".when_missing", "%q is not skip or deny", r.WhenMissing)
		return false
	}
	if len(r.Key) == 0 {
		rc.rep.add(rp+".when_missing", "only for a rule with a key: a rule without one never lacks a scope")
		return false
	}
	return true
}

// ruleName checks the name of rules[i]: valid, unique, not reserved.
func (rc *ruleCompiler) ruleName(rp string, r *Rule, i int) bool {
	switch j, dup := rc.names[r.Name]; {
	case r.Name == "":
		rc.rep.add(rp+".name", "required")
	case !syntax.Name(r.Name):
		rc.rep.addf(rp+".name", "%q must match [A-Za-z0-9_.-]+", r.Name)
	case dup:
		rc.rep.addf(rp+".name", "%q is already the name of rules[%d]", r.Name, j)
	case r.Name == PolicyExempt || r.Name == PolicyDeny:
		rc.rep.addf(rp+".name", "%q is reserved: it names the decisions of the policy's %s list", r.Name, r.Name)
	case r.Name == PolicyDescriptorLimit:
		rc.rep.addf(rp+".name", "%q is reserved: it names the decisions of a gateway descriptor's own limit", r.Name)
	default:
		rc.names[r.Name] = i
		return true
	}
	return false
}

// rollout checks the rule's enforce_percent.
func (rc *ruleCompiler) rollout(rp string, r *Rule, cr *cRule) bool {
	switch {
	case r.EnforcePercent < 0 || r.EnforcePercent > 100:
		rc.rep.addf(rp+".enforce_percent", "%d is out of range [1, 100]", r.EnforcePercent)
		return false
	case r.EnforcePercent != 0 && r.EnforcePercent != 100 && r.Shadow:
		rc.rep.add(rp+".enforce_percent", "a shadow rule enforces nothing: remove shadow or enforce_percent")
		return false
	case r.EnforcePercent != 0 && r.EnforcePercent != 100:
		cr.rollout = uint8(r.EnforcePercent)
	}
	return true
}

// soft checks the rule's soft: a soft rule admits what it would deny, so
// it cannot also be a shadow rule (which reports what it would deny),
// be rolled out (a share of keys to deny), or hold requests (max_wait:
// it would wait for units it does not need).
func (rc *ruleCompiler) soft(rp string, r *Rule, cr *cRule) bool {
	if !r.Soft {
		return true
	}
	ok := true
	if r.Shadow {
		rc.rep.add(rp+".soft", "a rule is soft (admit and mark) or shadow (report only), not both: remove one")
		ok = false
	}
	if r.EnforcePercent != 0 && r.EnforcePercent != 100 {
		rc.rep.add(rp+".soft", "a soft rule denies nothing, so it has no share to enforce: remove enforce_percent")
		ok = false
	}
	if r.MaxWait != 0 {
		rc.rep.add(rp+".soft", "a soft rule admits a request over its limit at once, so it never waits: remove max_wait")
		ok = false
	}
	cr.soft = ok && !rc.p.Shadow
	return ok
}

// consistency checks the rule's consistency and sync_interval, and that a
// rule decided away from the store (leased, async) has an algorithm, or
// tiers whose algorithms, can book units ahead.
func (rc *ruleCompiler) consistency(rp string, r *Rule, cr *cRule) bool {
	ok := true
	switch {
	case r.Consistency > quota.Async:
		rc.rep.addf(rp+".consistency", "unknown consistency %d", r.Consistency)
		ok = false
	case r.Consistency != quota.Async && r.SyncInterval != 0:
		rc.rep.addf(rp+".sync_interval", "is only for consistency async (the rule is %s)", r.Consistency)
		ok = false
	case r.Consistency == quota.Async && r.SyncInterval == 0:
		cr.sync = DefaultSyncInterval
	case r.Consistency == quota.Async && (r.SyncInterval < MinSyncInterval || r.SyncInterval > MaxSyncInterval):
		rc.rep.addf(rp+".sync_interval", "%s is out of range [%s, %s]", r.SyncInterval, MinSyncInterval, MaxSyncInterval)
		ok = false
	default:
		cr.sync = r.SyncInterval
	}
	if r.Consistency == quota.Exact {
		return ok
	}
	if !r.Rate.Tier {
		if !r.Algorithm.CanBookAhead() {
			rc.rep.addf(rp+".consistency", "%s needs token_bucket or gcra, not %s", r.Consistency, r.Algorithm)
			ok = false
		}
		return ok
	}
	for _, n := range rc.tierNames {
		if t, has := rc.c.tiers[n]; has && !t.limit.Algorithm.CanBookAhead() {
			rc.rep.addf(rp+".consistency", "%s needs token_bucket or gcra, but tier %q uses %s", r.Consistency, n, t.limit.Algorithm)
			ok = false
		}
	}
	return ok
}

// methodMatch compiles the rule's match.method: any method, a glob, or
// one exact method.
func (rc *ruleCompiler) methodMatch(rp string, r *Rule, cr *cRule) bool {
	if r.Match.Method == "" {
		cr.any = true
	} else if err := validMethodPattern(r.Match.Method); err != nil {
		rc.rep.add(rp+".match.method", err.Error())
		return false
	} else if isGlob(r.Match.Method) {
		cr.glob = r.Match.Method
	} else {
		cr.exact = r.Match.Method
	}
	return true
}

// key compiles the rule's key: its header scopes, known scopes none of
// which repeats, and the ip prefix lengths its buckets are keyed by.
func (rc *ruleCompiler) key(rp string, r *Rule, cr *cRule) bool {
	ok := keyHeaders(rc.rep, rp, r, cr, rc.hdrNames)
	seen := 0
	for j, s := range r.Key {
		if !s.valid() {
			rc.rep.addf(rp+".key["+strconv.Itoa(j)+"]", "unknown scope %d", s)
			ok = false
			continue
		}
		if s == ScopeHeader {
			continue // names checked by keyHeaders
		}
		if seen&(1<<s) != 0 {
			rc.rep.addf(rp+".key["+strconv.Itoa(j)+"]", "scope %q is repeated", s.String())
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
			rc.rep.addf(rp+"."+pf.field, "is only for rules whose key has ip (the key is [%s])", scopeList(r.Key))
			ok = false
		case pf.v < 1 || pf.v > pf.max:
			rc.rep.addf(rp+"."+pf.field, "%d is out of range [1, %d]", pf.v, pf.max)
			ok = false
		default:
			*pf.dst = pf.v
		}
	}
	return ok
}

// limit compiles the rule's rate, burst, windows and algorithm, or its
// rate "tier" (the tiers then set them), and checks that its cost fits
// every capacity it may meet.
func (rc *ruleCompiler) limit(rp string, r *Rule, i int, cr *cRule) bool {
	if r.Rate.Tier {
		return rc.tierLimit(rp, r, i, cr)
	}
	if r.Rate == (Rate{}) && len(r.Windows) == 0 {
		rc.rep.add(rp+".rate", "required")
		return false
	}
	tl, ok := limitsOf(rc.rep, rp, r.Rate, r.Burst, r.Windows, r.Algorithm)
	if !ok {
		return false
	}
	cr.limit = tl
	for _, w := range append([]tierLimit{tl}, tl.more...) {
		if l := w.limit; r.Cost > l.Capacity() {
			rc.rep.addf(rp+".cost", "%d exceeds the rule's capacity %d (%s): such a request could never pass", r.Cost, l.Capacity(), capacityWhat(l))
			ok = false
		}
	}
	return ok
}

// tierLimit checks a rule with rate "tier": the tier sets its burst,
// windows and algorithm, and its cost must fit every tier.
func (rc *ruleCompiler) tierLimit(rp string, r *Rule, i int, cr *cRule) bool {
	ok := true
	cr.byTier = true
	if rc.needTier < 0 {
		rc.needTier = i
	}
	if r.Burst != 0 {
		rc.rep.add(rp+".burst", `must not be set when rate is "tier" (the tier sets it)`)
		ok = false
	}
	if len(r.Windows) != 0 {
		rc.rep.add(rp+".rate", `"tier" is one rate: give the tiers several windows instead`)
		ok = false
	}
	if r.Algorithm != quota.TokenBucket {
		rc.rep.add(rp+".algorithm", `must not be set when rate is "tier" (the tier sets it)`)
		ok = false
	}
	if r.Cost <= 0 {
		return ok
	}
	for _, n := range rc.tierNames {
		if t, has := rc.c.tiers[n]; has && r.Cost > t.minCapacity() {
			rc.rep.addf(rp+".cost", "%d exceeds the capacity %d of tier %q: such a request could never pass", r.Cost, t.minCapacity(), n)
			ok = false
		}
	}
	return ok
}

// keyParts prebuilds the parts of the rule's bucket keys: the key of a
// rule without key scopes, or the head and the scope labels of a keyed
// one.
func (rc *ruleCompiler) keyParts(cr *cRule) {
	cr.prefix = rc.prefix
	if len(cr.key) == 0 {
		cr.noKey = rc.prefix + "{" + cr.name + "}"
		return
	}
	cr.mid = "}:" + cr.name
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
	cr.head = rc.prefix + "{" + cr.scopeLabels[0]
}

// defaultTier checks default_tier: required by a rule with rate "tier",
// and one of the tiers when set.
func (rc *ruleCompiler) defaultTier() {
	p := rc.p
	if rc.needTier >= 0 {
		switch {
		case p.DefaultTier == "":
			rc.rep.add("rules["+strconv.Itoa(rc.needTier)+"].rate", `"tier" needs default_tier, which is not set`)
		default:
			if t, ok := rc.c.tiers[p.DefaultTier]; ok {
				rc.c.defaultTier = t
			} else if _, declared := p.Tiers[p.DefaultTier]; !declared {
				rc.rep.addf("default_tier", "%q is not one of the tiers", p.DefaultTier)
			}
		}
	} else if p.DefaultTier != "" {
		if _, declared := p.Tiers[p.DefaultTier]; !declared {
			rc.rep.addf("default_tier", "%q is not one of the tiers", p.DefaultTier)
		}
	}
}
