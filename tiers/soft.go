package tiers

import (
	"context"
	"strings"

	"github.com/floodgate-go/floodgate"
)

// Soft rules (Rule.Soft). A soft bucket is taken with the hard ones, in
// the same Take, so a request within every limit costs one round trip
// as before. When that take denies and every bucket that denied is a
// soft rule's, those buckets are left out (meta.softOver: charged
// nothing, the request marked) and the rest is taken again; a hard
// bucket that denies denies the request, and then nothing is charged,
// at soft rules neither. Each retake leaves out at least one more soft
// bucket, so there are at most as many as the request has soft buckets.

// soften is run's answer to an enforced take that denied when the call
// has soft buckets: it leaves out the soft buckets that denied and, unless
// read (the buckets were only read) or the store failed (its fail modes
// decided), takes the rest again. It returns the final verdict and error.
func (l *Limiter) soften(ctx context.Context, c *compiled, sc *scratch, err error, hold, read bool) (bool, error) {
	for {
		softDenied, hardDenied := false, false
		for i := range sc.all {
			m := &sc.metas[i]
			if m.shadow || m.softOver || !sc.taken[i] || sc.res[i].Allowed {
				continue
			}
			if m.soft {
				softDenied = true
			} else {
				hardDenied = true
			}
		}
		if hardDenied || !softDenied {
			return false, err // a hard deny; or a store that denied with every bucket allowing
		}
		for i := range sc.all {
			if m := &sc.metas[i]; m.soft && !m.shadow && sc.taken[i] && !sc.res[i].Allowed {
				m.softOver, sc.softOver = true, true
			}
		}
		if read || err != nil {
			return true, err
		}
		var allowed bool
		if allowed, err = l.take(ctx, c, sc, false, hold); allowed || sc.gone {
			return allowed, err
		}
	}
}

// markSoft names, in each request's decision that allows, the soft
// windows it went over (Decision.SoftExceeded).
func (sc *scratch) markSoft(c *compiled, out []floodgate.Decision) {
	for k := range sc.items {
		if out[k].Allowed {
			out[k].SoftExceeded = sc.softNames(c, sc.itemRefs(k))
		}
	}
}

// softNames joins the names of the soft windows left out of the takes,
// among refs (nil: every bucket of the call), each once, in order.
func (sc *scratch) softNames(c *compiled, refs []int32) string {
	var names []string
	add := func(i int32) {
		m := &sc.metas[i]
		if !m.softOver {
			return
		}
		name := c.rules[m.rule].policyName(m, &sc.all[i])
		for _, n := range names {
			if n == name {
				return
			}
		}
		names = append(names, name)
	}
	if refs == nil {
		for i := range sc.all {
			add(int32(i))
		}
	} else {
		for _, i := range refs {
			add(i)
		}
	}
	switch len(names) {
	case 0:
		return ""
	case 1:
		return names[0]
	}
	return strings.Join(names, ",")
}
