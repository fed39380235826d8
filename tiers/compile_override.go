package tiers

import (
	"net/netip"
	"slices"
	"strconv"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/syntax"
	"github.com/floodgate-go/floodgate/quota"
)

// overrides compiles p.Overrides into the rules they name (byName): a
// limit for one key, found by the key's body, or for every key whose
// address is inside a network wider than the rule's buckets.
func (rc *ruleCompiler) overrides(byName map[string]*cRule) {
	kb := newKeyBuilder()
	for i := range rc.p.Overrides {
		o := &rc.p.Overrides[i]
		op := "overrides[" + strconv.Itoa(i) + "]"
		r, oh, ok := rc.overrideRule(op, o, byName)
		if !ok {
			continue
		}
		otl, ok := rc.overrideLimit(op, o, r)
		if !ok {
			continue
		}
		rc.overrideKey(op, o, r, oh, otl, kb)
	}
}

// overrideRule finds the keyed rule o names and checks that o's key gives
// a value for exactly the rule's scopes; it returns the rule and o's
// header values by lower-case name.
func (rc *ruleCompiler) overrideRule(op string, o *Override, byName map[string]*cRule) (*cRule, map[string]string, bool) {
	r, ok := byName[o.Rule]
	if !ok {
		if o.Rule == "" {
			rc.rep.add(op+".rule", "required")
		} else if _, exists := rc.names[o.Rule]; !exists {
			rc.rep.addf(op+".rule", "no rule is named %q", o.Rule)
		}
		return nil, nil, false
	}
	if len(r.key) == 0 {
		rc.rep.addf(op+".rule", "rule %q has no key; change its rate instead", o.Rule)
		return nil, nil, false
	}
	oh, herr := overrideHeaders(o.KeyHeaders)
	if herr != "" {
		rc.rep.add(op+".key", herr)
		return nil, nil, false
	}
	if !sameScopes(r.key, o.Key) || !sameHeaders(r.keyHeaders, oh) {
		rc.rep.addf(op+".key", "scopes [%s] do not match rule %q key [%s]", overrideKeyList(o.Key, oh), o.Rule, r.keyList())
		return nil, nil, false
	}
	return r, oh, true
}

// overrideLimit compiles o's limit: its algorithm (o's, else the rule's,
// else token bucket) must suit the rule's consistency and max_wait, and
// its capacities must hold the rule's cost.
func (rc *ruleCompiler) overrideLimit(op string, o *Override, r *cRule) (tierLimit, bool) {
	if o.Rate.Tier {
		rc.rep.add(op+".rate", `an override's rate cannot be "tier"`)
		return tierLimit{}, false
	}
	if o.Rate == (Rate{}) && len(o.Windows) == 0 {
		rc.rep.add(op+".rate", "required")
		return tierLimit{}, false
	}
	alg := quota.TokenBucket
	switch {
	case o.Algorithm != nil:
		alg = *o.Algorithm
	case !r.byTier:
		alg = r.limit.limit.Algorithm
	}
	rate, ok := rc.overrideCalendar(op, o, r)
	if !ok {
		return tierLimit{}, false
	}
	otl, ok := limitsOf(rc.rep, op, rate, o.Burst, o.Windows, alg)
	if !ok {
		return tierLimit{}, false
	}
	if r.mode != quota.Exact && !alg.CanBookAhead() {
		rc.rep.addf(op+".algorithm", "rule %q is %s, which needs token_bucket or gcra, not %s", o.Rule, r.mode, alg)
		return tierLimit{}, false
	}
	if r.shape.maxWait > 0 && !alg.CanBookAhead() {
		rc.rep.addf(op+".algorithm", "rule %q has max_wait, which needs token_bucket or gcra (they book units ahead), not %s", o.Rule, alg)
		return tierLimit{}, false
	}
	if r.cost > otl.minCapacity() {
		l := otl.limit
		for _, w := range append([]tierLimit{otl}, otl.more...) {
			if r.cost > w.limit.Capacity() {
				l = w.limit
				break
			}
		}
		rc.rep.addf(op+".rate", "capacity %d (%s) is less than rule %q cost %d: such a request could never pass", l.Capacity(), capacityWhat(l), o.Rule, r.cost)
		return tierLimit{}, false
	}
	return otl, true
}

// overrideKey gives rule r the override o (limit otl) of one key, found by
// its body, or of a network wider than the rule's buckets (r.cidrs),
// unless o's key values are wrong or another override has the same key.
func (rc *ruleCompiler) overrideKey(op string, o *Override, r *cRule, oh map[string]string, otl tierLimit, kb *keyBuilder) {
	req, ok := rc.overrideRequest(op, o, r, oh)
	if !ok {
		return
	}
	if req.wide {
		for j := range r.cidrs {
			if r.cidrs[j].net == req.net && slices.Equal(r.cidrs[j].vals, req.vals) {
				rc.rep.addf(op+".key", "rule %q already has an override for this key", o.Rule)
				return
			}
		}
		r.cidrs = append(r.cidrs, cidrOverride{net: req.net, vals: req.vals, limit: otl})
		return
	}
	body, _ := kb.appendKeyBody(nil, r, &req.req)
	if r.overrides == nil {
		r.overrides = make(map[string]tierLimit)
	}
	if _, dup := r.overrides[string(body)]; dup {
		rc.rep.addf(op+".key", "rule %q already has an override for this key", o.Rule)
		return
	}
	r.overrides[string(body)] = otl
}

// overrideReq is an override's key as a request of that identity, and,
// for an address inside a network wider than the rule's buckets (wide),
// that network and the key's other values by position in the rule's key.
type overrideReq struct {
	req  floodgate.Request
	net  netip.Prefix
	wide bool
	vals []string
}

// overrideRequest builds the request whose key is o's key for rule r,
// checking every value: headers not empty, an ip network no narrower than
// the rule's buckets, and valid key values.
func (rc *ruleCompiler) overrideRequest(op string, o *Override, r *cRule, oh map[string]string) (overrideReq, bool) {
	out := overrideReq{vals: make([]string, len(r.key))}
	req, id := &out.req, &out.req.Identity
	bad := false
	for j, s := range r.key {
		switch s {
		case ScopeHeader:
			v := oh[r.keyHeaders[j]]
			if v == "" {
				rc.rep.add(op+".key.header:"+r.keyHeaders[j], "must not be empty")
				bad = true
				continue
			}
			out.vals[j] = v
			req.Headers = append(req.Headers, floodgate.Header{Name: r.keyHeaders[j], Value: v})
		case ScopeIP:
			n, ok := rc.overrideNet(op, o, r)
			if !ok {
				bad = true
				continue
			}
			out.net, out.wide = n, n.Bits() < r.prefixBits(n.Addr())
			id.IP = n.Addr()
		default:
			v, err := keyValue(o.Key[s])
			if err != nil {
				rc.rep.add(op+".key."+s.String(), err.Error())
				bad = true
				continue
			}
			out.vals[j] = v
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
	}
	return out, !bad
}

// overrideNet parses o's ip value: an address or a network, no narrower
// than rule r's buckets (every address of one bucket shares its limit).
func (rc *ruleCompiler) overrideNet(op string, o *Override, r *cRule) (netip.Prefix, bool) {
	n, err := syntax.ParseNet(o.Key[ScopeIP])
	if err != nil {
		rc.rep.add(op+".key.ip", err.Error())
		return netip.Prefix{}, false
	}
	field, bucket := "ipv6_prefix", r.prefixBits(n.Addr())
	if n.Addr().Is4() {
		field = "ipv4_prefix"
	}
	if n.Bits() > bucket {
		whole, _ := n.Addr().Prefix(bucket)
		rc.rep.addf(op+".key.ip", "%s is narrower than rule %q's buckets (%s %d): every address of one /%d shares one bucket and one limit; name %s or a wider network",
			o.Key[ScopeIP], o.Rule, field, bucket, bucket, whole)
		return netip.Prefix{}, false
	}
	return n, true
}

// prefixBits is the prefix length rule r keys addresses of a's family by.
func (r *cRule) prefixBits(a netip.Addr) int {
	if a.Is4() {
		return r.v4bits
	}
	return r.v6bits
}
