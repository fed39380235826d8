package tiers

import (
	"github.com/floodgate-go/floodgate"
)

// Gradual roll-out (Rule.EnforcePercent). A request outside a rule's
// enforced share sees the rule as a shadow rule: it is charged, in the
// shadow take, only when every level allows, and a denial is reported with
// Decision.Shadow. Which requests are enforced is decided by a hash, not
// by chance: the same principal on every instance, after every restart,
// and a test knows exactly which.

// FNV-1a, 64 bits: stable across processes and versions (unlike
// hash/maphash, whose seed is per process), and cheap over a few short
// strings.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnvAdd[S string | []byte](h uint64, s S) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

// fnvSep ends one field of a hashed tuple, so ("ab", "c") and ("a", "bc")
// differ.
func fnvSep(h uint64) uint64 { return (h ^ 0xff) * fnvPrime }

// rolloutShare maps a 64-bit hash to [0, 100) after mixing its bits (the
// low bits of FNV-1a alone follow the last bytes too closely).
func rolloutShare(h uint64) int {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return int(h % 100)
}

// enforces reports whether rule r denies for request req: always, unless
// the rule is rolled out to a share of its keys (r.rollout in [1, 99]).
// body is the request's key body for r ("{scope0=v0}:rule..." without
// prefix or suffix), nil for a rule without key, whose share is chosen by
// the request's identity.
func (r *cRule) enforces(body []byte, req *floodgate.Request) bool {
	return r.rollout == 0 || r.inShare(body, req)
}

// inShare reports whether req falls in the enforced share of rule r.
func (r *cRule) inShare(body []byte, req *floodgate.Request) bool {
	h := fnvSep(fnvAdd(uint64(fnvOffset), r.name))
	if body != nil {
		h = fnvAdd(h, body)
	} else {
		id := &req.Identity
		h = fnvSep(fnvAdd(h, id.Tenant))
		h = fnvSep(fnvAdd(h, id.User))
		h = fnvSep(fnvAdd(h, id.APIKey))
		if ip := normIP(id.IP); ip.IsValid() {
			if ip.Is6() { // a client owns its /64: one share for all of it
				if p, err := ip.Prefix(defaultIPv6Prefix); err == nil {
					ip = p.Addr()
				}
			}
			a := ip.As16()
			h = fnvAdd(h, a[:])
		}
	}
	return rolloutShare(h) < int(r.rollout)
}
