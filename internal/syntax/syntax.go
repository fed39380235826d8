// Package syntax holds the spellings the policy file shares between its
// sections: names (of rules, tiers, headers) and networks (an address or
// a CIDR). What it decides: which strings are valid, the normal form of a
// network, and the error that names the fix.
package syntax

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// Name reports whether s can name a rule, a tier or a header: one or
// more of [A-Za-z0-9_.-].
func Name(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// ParseNet parses an address ("192.0.2.1", a /32 or /128) or a CIDR
// ("192.0.2.0/24") into a normalised prefix: IPv4-mapped prefixes become
// IPv4 ones. A CIDR with bits set past its length or a zone is an error
// naming the fix.
func ParseNet(v string) (netip.Prefix, error) {
	if v == "" {
		return netip.Prefix{}, errors.New("must not be empty")
	}
	if !strings.Contains(v, "/") {
		a, err := netip.ParseAddr(v)
		if err != nil || a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("%q is not an IP address or CIDR", v)
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(v)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not an IP address or CIDR", v)
	}
	return CheckNet(p)
}

// CheckNet validates and normalises a prefix given in Go or parsed from
// YAML.
func CheckNet(p netip.Prefix) (netip.Prefix, error) {
	if !p.IsValid() {
		return netip.Prefix{}, errors.New("is not a valid CIDR")
	}
	if p.Addr().Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("%s has a zone; networks have none", p)
	}
	if m := p.Masked(); m != p {
		return netip.Prefix{}, fmt.Errorf("%s has bits set past /%d: write %s", p, p.Bits(), m)
	}
	if p.Addr().Is4In6() {
		// Masked, an address in ::ffff:0:0/96 has a prefix of at least
		// 96 bits: the ffff is in the bits 80 to 95.
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p, nil
}

// MaxMeter is the longest name of a meter.
const MaxMeter = 64

// Meter checks the name of a meter (a rule's meter:,
// floodgate.ReportMeter): 1 to MaxMeter of [A-Za-z0-9_.-]. The error says
// what is wrong, for the caller to prefix with where.
func Meter(s string) error {
	switch {
	case s == "":
		return errors.New("is empty (leave it out for the default meter)")
	case len(s) > MaxMeter:
		return fmt.Errorf("%.20q... is longer than %d bytes", s, MaxMeter)
	case !Name(s):
		return fmt.Errorf("%q is not a meter name: use one or more of [A-Za-z0-9_.-], such as output_tokens", s)
	}
	return nil
}
