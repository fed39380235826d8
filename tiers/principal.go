package tiers

import (
	"strings"

	"github.com/floodgate-go/floodgate"
)

// AppendPrincipal appends to dst who the rule named policy limits in r:
// the values of the rule's key, readable, as "scope=value" separated by
// spaces in the key's order ("ip=203.0.113.66 user=admin"), and reports
// whether policy names a rule of the policy in force. policy is what a
// Decision or a Quota of this Limiter names: a rule's name, "rule/period"
// for a window of a rule with several (the rule's key), or PolicyDeny
// (the client address: "ip=192.0.2.1"). It is for telling an operator
// who is denied (package guard's heavy hitters), not for keys: the same
// principal as the rule's bucket, in a form a person reads.
//
// An ip is written as the rule keys it: the address, or the network of
// the rule's prefix length ("ip=2001:db8:1:2::/64"). An api_key is
// written as its bucket's key has it, '#' and 32 hex digits of its
// SHA-256, never raw. A header scope is "header:<name>=value". Other
// values are written as sent, except that a byte outside printable ASCII,
// a space, '%' or '=' is written %XX, and a value longer than 64 bytes is
// '#' and 32 hex digits of its SHA-256, as in keys. A scope the request
// lacks (a rule with when_missing: deny) is written with no value
// ("user="). A rule without key limits everyone at once: "*".
//
// It allocates nothing when dst has room.
func (l *Limiter) AppendPrincipal(dst []byte, policy string, r *floodgate.Request) ([]byte, bool) {
	if policy == PolicyDeny {
		dst = append(dst, "ip="...)
		if r.Identity.IP.IsValid() {
			dst = normIP(r.Identity.IP).AppendTo(dst)
		}
		return dst, true
	}
	name := policy
	if i := strings.IndexByte(policy, '/'); i >= 0 {
		name = policy[:i] // a window: rule names never have a '/'
	}
	c := l.state.Load()
	i, ok := c.byName[name]
	if !ok {
		return dst, false
	}
	cr := &c.rules[i]
	if len(cr.key) == 0 {
		return append(dst, '*'), true
	}
	sc := l.pool.Get().(*scratch)
	defer l.pool.Put(sc)
	kb := sc.kb
	for j, s := range cr.key {
		if j > 0 {
			dst = append(dst, ' ')
		}
		dst = append(dst, s.String()...)
		if s == ScopeHeader {
			dst = append(append(dst, ':'), cr.keyHeaders[j]...)
		}
		dst = append(dst, '=')
		switch s {
		case ScopeIP:
			if ip := r.Identity.IP; ip.IsValid() {
				dst = kb.appendIP(dst, normIP(ip), cr)
			}
		case ScopeAPIKey:
			if k := r.Identity.APIKey; k != "" {
				dst = kb.appendAPIKey(dst, k)
			}
		default:
			if v, ok := cr.component(j, r); ok {
				dst = kb.appendReadable(dst, v)
			}
		}
	}
	return dst, true
}

// appendReadable appends v as AppendPrincipal writes a value: as sent but
// for %XX escapes of what would be ambiguous or unprintable, hashed when
// longer than maxRawComponent.
func (kb *keyBuilder) appendReadable(b []byte, v string) []byte {
	if len(v) > maxRawComponent {
		return kb.appendHashed(b, v)
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c <= ' ' || c >= 0x7f || c == '%' || c == '=' {
			b = append(b, '%', hexDigits[c>>4], hexDigits[c&15])
			continue
		}
		b = append(b, c)
	}
	return b
}
