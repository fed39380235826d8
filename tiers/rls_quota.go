package tiers

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/floodgate-go/floodgate/quota"
)

// QuotaTarget is what an RLQS bucket id resolves to (Limiter.QuotaBuckets).
type QuotaTarget struct {
	// Match is how the bucket id met the domain's mapping:
	// DescriptorUnknown (no descriptor has its keys and values),
	// DescriptorNoLimit, DescriptorUnlimited (also an exempt client
	// address) or DescriptorLimited.
	Match DescriptorMatch
	// Name is the descriptor's limit name (its Name, else its rule's).
	Name string
	// Deny: the id matched a deny descriptor (RLSDescriptor.Deny, not
	// shadow) or a client address in the policy's deny list.
	Deny bool
	// Buckets are the buckets of the id's rule that are charged (its
	// shadow windows left out), with the keys and limits a call of
	// ShouldRateLimit with the same entries charges; none when the rule
	// does not apply to the id (an ip value that is no address).
	Buckets []quota.Bucket
}

// QuotaBuckets resolves an RLQS bucket id (Envoy's bucket_id_builder: a
// map of strings) of a domain of the rls: section that has quota: true,
// under the policy in force, into the buckets its usage is charged to,
// appended to dst. The id matches the domain's descriptor whose entries
// have the id's keys (in the order that descriptor lists them) as a
// call's descriptor with those entries matches, and its buckets are the
// ones AdmitDescriptors would charge for that descriptor: the edge's
// quota and the services' calls spend the same buckets.
//
// It charges nothing. The error names a domain that is not a quota
// domain, an empty id, or a rule whose buckets cannot be charged after the
// fact (not token_bucket or gcra; a tier rate can only be checked here).
func (l *Limiter) QuotaBuckets(dst []quota.Bucket, domain string, id map[string]string) (QuotaTarget, error) {
	c := l.state.Load()
	qt := QuotaTarget{Buckets: dst}
	var orders map[string][]string
	if c.rls != nil {
		orders = c.rls.quota[domain]
	}
	switch {
	case orders == nil:
		return qt, fmt.Errorf("tiers: QuotaBuckets: domain %q is not an rls: domain with quota: true", domain)
	case len(id) == 0:
		return qt, fmt.Errorf("tiers: QuotaBuckets: the bucket id is empty")
	}
	keys := make([]string, 0, len(id))
	for k := range id {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	order := orders[strings.Join(keys, "\x00")]
	if order == nil {
		return qt, nil
	}
	ds := []Descriptor{{Entries: make([]DescriptorEntry, len(order))}}
	for i, k := range order {
		ds[0].Entries[i] = DescriptorEntry{Key: k, Value: id[k]}
	}
	var out [1]DescriptorDecision
	sc := l.pool.Get().(*scratch)
	defer l.release(sc)
	sc.domain = domain
	sc.matchDescriptors(c.rls.domains[domain], ds, out[:])
	qt.Match, qt.Name = out[0].Match, out[0].Name
	if qt.Match != DescriptorLimited {
		return qt, nil
	}
	if t := sc.targets[0]; t.deny != nil {
		qt.Deny = !t.deny.Shadow
		return qt, nil
	}
	sc.descriptorItems(ds, out[:], false)
	it := &sc.items[0]
	if denied, listed := c.listed(it.req); listed {
		qt.Deny = denied && !c.shadow
		if !qt.Deny {
			qt.Match = DescriptorUnlimited
		}
		return qt, nil
	}
	sc.all, sc.metas = sc.all[:0], sc.metas[:0]
	sc.kb.empty = it.empty
	sc.resolve(c, it.req, int(it.rule), int(it.rule)+1)
	sc.kb.empty = 0
	sc.setKeys(0)
	for i := range sc.all {
		if sc.metas[i].shadow {
			continue
		}
		b := sc.all[i]
		if !b.Limit.Algorithm.CanBookAhead() {
			return QuotaTarget{Buckets: dst}, fmt.Errorf("tiers: QuotaBuckets: rule %q is %s: an RLQS bucket is charged after the fact, which takes token_bucket or gcra", b.Rule, b.Limit.Algorithm)
		}
		qt.Buckets = append(qt.Buckets, b)
	}
	return qt, nil
}

// compileQuota checks a domain with quota: true (RLSDomain.Quota) and
// records the key order of its descriptors by key set.
func (rc *rlsCompiled) compileQuota(rep *reporter, dp string, dom *RLSDomain, byName map[string]*cRule) {
	if rc.quota == nil {
		rc.quota = map[string]map[string][]string{}
	}
	orders := map[string][]string{}
	from := map[string]string{}
	for j := range dom.Descriptors {
		d := &dom.Descriptors[j]
		p := dp + ".descriptors[" + strconv.Itoa(j) + "]"
		keys := make([]string, len(d.Entries))
		for k, e := range d.Entries {
			keys[k] = e.Key
		}
		sorted := slices.Sorted(slices.Values(keys))
		if k := dupIndex(sorted); k >= 0 {
			rep.addf(p+".entries", "key %q twice: with quota: true a bucket id is a map, which has one value a key", sorted[k])
			continue
		}
		sig := strings.Join(sorted, "\x00")
		if prev, ok := orders[sig]; ok {
			if !slices.Equal(prev, keys) {
				rep.addf(p+".entries", "keys %q in another order than %s's %q: with quota: true a bucket id is a map, which has no order; list them alike", keys, from[sig], prev)
			}
		} else {
			orders[sig], from[sig] = keys, p
		}
		r := byName[d.Rule]
		if r == nil || d.Unlimited || d.NoLimit || d.Deny != nil || r.byTier {
			continue
		}
		for _, w := range append([]tierLimit{r.limit}, r.limit.more...) {
			if !w.limit.Algorithm.CanBookAhead() {
				rep.addf(p+".rule", "rule %q is %s: with quota: true a bucket is charged after the fact, which takes token_bucket or gcra", d.Rule, w.limit.Algorithm)
				break
			}
		}
	}
	rc.quota[dom.Domain] = orders
}

// dupIndex returns the index of the first of two equal neighbours of
// sorted, or -1.
func dupIndex(sorted []string) int {
	for i := 1; i < len(sorted); i++ {
		if sorted[i] == sorted[i-1] {
			return i
		}
	}
	return -1
}
