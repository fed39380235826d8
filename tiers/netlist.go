package tiers

import (
	"net/netip"
	"slices"
)

// netSet is a set of networks answering "is this address inside one of
// them?" with one map lookup per distinct prefix length in the set (at
// most 33 for IPv4 and 129 for IPv6), whatever the number of networks.
// Its prefixes are normalised (checkNet): masked, IPv4 never mapped.
type netSet struct {
	v4, v6 []netLevel // longest prefix first
}

// netLevel holds the networks of one prefix length, by masked address.
type netLevel struct {
	bits int
	nets map[netip.Addr]struct{}
}

func (s *netSet) add(p netip.Prefix) {
	levels := &s.v6
	if p.Addr().Is4() {
		levels = &s.v4
	}
	for i := range *levels {
		if l := &(*levels)[i]; l.bits == p.Bits() {
			l.nets[p.Addr()] = struct{}{}
			return
		}
	}
	*levels = append(*levels, netLevel{bits: p.Bits(), nets: map[netip.Addr]struct{}{p.Addr(): {}}})
	slices.SortFunc(*levels, func(a, b netLevel) int { return b.bits - a.bits })
}

// empty reports whether the set has no network.
func (s *netSet) empty() bool { return s == nil || len(s.v4) == 0 && len(s.v6) == 0 }

// contains reports whether a (normalised: unmapped, without zone) is
// inside one of the networks.
func (s *netSet) contains(a netip.Addr) bool {
	if s == nil || !a.IsValid() {
		return false
	}
	levels := s.v6
	if a.Is4() {
		levels = s.v4
	}
	for i := range levels {
		p, err := a.Prefix(levels[i].bits)
		if err != nil {
			continue
		}
		if _, ok := levels[i].nets[p.Addr()]; ok {
			return true
		}
	}
	return false
}

// normIP is the address a request is keyed and matched by: without a
// zone, and an IPv4-mapped IPv6 address as the IPv4 address it maps, so
// one client has one key whatever the socket family it came through.
func normIP(a netip.Addr) netip.Addr {
	if a.Is4In6() {
		a = a.Unmap()
	}
	if a.Zone() != "" {
		a = a.WithZone("")
	}
	return a
}
