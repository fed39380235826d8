package policyfile

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate-go/floodgate/internal/syntax"
	"github.com/floodgate-go/floodgate/tiers"
)

// Identity is the identity: section: where the transport finds each part
// of a request's identity, so the common cases need no Go. Package guard
// builds package interceptor's options from it; a transport builds its
// extractors once, so Watch refuses a reload that changes the section
// (see Targets.Identity).
type Identity struct {
	// User, Tenant, APIKey and Tier list the sources of each, tried in
	// order until one gives a value. A source is "header:NAME", a header
	// (or gRPC metadata key) that your gateway or auth layer sets and
	// strips from client requests (a client can send any header), or
	// "claim:NAME", a claim of the verified token your auth middleware
	// keeps in the context (package guard needs WithClaims to read it).
	// YAML: user, tenant, api_key, tier, each one source or a list.
	User, Tenant, APIKey, Tier []string
	// ClientIPHeader is the header trusted proxies forward the client's
	// address in: "x-forwarded-for" (the default), "forwarded" (RFC 7239)
	// or "x-real-ip". YAML: client_ip.header.
	ClientIPHeader string
	// TrustedProxies are the proxies whose forwarding header is believed;
	// a request from any other peer is identified by the peer's address
	// whatever it sends. YAML: client_ip.trusted_proxies, CIDRs or
	// addresses.
	TrustedProxies []netip.Prefix
	// IPv4Prefix and IPv6Prefix, when set, are how many leading bits of
	// the client address name its bucket for every rule keyed on ip that
	// does not say (tiers.Rule.IPv4Prefix): Load sets them on those rules.
	// YAML: client_ip.ipv4_prefix, client_ip.ipv6_prefix.
	IPv4Prefix, IPv6Prefix int
}

// identityHeaders are the forwarding headers client_ip.header may name.
var identityHeaders = []string{"x-forwarded-for", "forwarded", "x-real-ip"}

// identity decodes the identity: section at n into f.
func (d *decoder) identity(n *yaml.Node, f *File) {
	id := &Identity{}
	d.fields(n, "identity", func(k string, v *yaml.Node, fp string) {
		switch k {
		case "user":
			id.User = d.sources(v, fp)
		case "tenant":
			id.Tenant = d.sources(v, fp)
		case "api_key":
			id.APIKey = d.sources(v, fp)
		case "tier":
			id.Tier = d.sources(v, fp)
		case "client_ip":
			d.clientIP(v, fp, id)
		}
	})
	f.Identity = id
}

// sources decodes one source or a list of them.
func (d *decoder) sources(n *yaml.Node, path string) []string {
	nodes := []*yaml.Node{n}
	if n.Kind == yaml.SequenceNode {
		if len(n.Content) == 0 {
			d.rep.fail(path, n, "an empty list gives no source: leave the key out")
			return nil
		}
		nodes = n.Content
	}
	var out []string
	for i, sn := range nodes {
		sp := path
		if n.Kind == yaml.SequenceNode {
			sp = fmt.Sprintf("%s[%d]", path, i)
		}
		s, ok := d.str(sn, sp)
		if !ok {
			continue
		}
		kind, name, _ := strings.Cut(s, ":")
		switch {
		case kind != "header" && kind != "claim":
			d.rep.fail(sp, sn, "%q is not header:NAME or claim:NAME", s)
		case name == "":
			d.rep.fail(sp, sn, "%q names no %s", s, kind)
		case kind == "header" && !syntax.Name(name):
			d.rep.fail(sp, sn, "%q is not a header name ([A-Za-z0-9_.-])", name)
		default:
			if kind == "header" {
				s = "header:" + strings.ToLower(name)
			}
			out = append(out, s)
		}
	}
	return out
}

// clientIP decodes identity.client_ip.
func (d *decoder) clientIP(n *yaml.Node, path string, id *Identity) {
	d.fields(n, path, func(k string, v *yaml.Node, fp string) {
		switch k {
		case "header":
			if s, ok := d.str(v, fp); ok {
				h := strings.ToLower(s)
				if !slices.Contains(identityHeaders, h) {
					d.rep.fail(fp, v, "%q is not one of %s", s, strings.Join(identityHeaders, ", "))
				}
				id.ClientIPHeader = h
			}
		case "trusted_proxies":
			id.TrustedProxies = d.prefixes(v, fp)
		case "ipv4_prefix":
			id.IPv4Prefix = d.bits(v, fp, 32)
		case "ipv6_prefix":
			id.IPv6Prefix = d.bits(v, fp, 128)
		}
	})
	if id.ClientIPHeader != "" && len(id.TrustedProxies) == 0 {
		d.rep.fail(path+".header", n, "a forwarding header is believed only from trusted proxies: list them in trusted_proxies")
	}
}

// prefixes decodes a list of CIDRs or addresses, as the policy's other
// network lists are (exempt:, deny:).
func (d *decoder) prefixes(n *yaml.Node, path string) []netip.Prefix {
	if !d.kind(n, path, yaml.SequenceNode, "a list") {
		return nil
	}
	out := make([]netip.Prefix, 0, len(n.Content))
	for i, pn := range n.Content {
		pp := fmt.Sprintf("%s[%d]", path, i)
		s, ok := d.str(pn, pp)
		if !ok {
			continue
		}
		p, err := syntax.ParseNet(s)
		if err != nil {
			d.rep.fail(pp, pn, "%s", err)
			continue
		}
		out = append(out, p)
	}
	return out
}

// bits decodes a prefix length in [1, most].
func (d *decoder) bits(n *yaml.Node, path string, most int64) int {
	v := d.integer(n, path)
	if v > most {
		d.rep.fail(path, n, "%d is more than %d bits", v, most)
		return 0
	}
	return int(v)
}

// applyIdentity sets the section's IP prefix lengths on every rule of
// limits keyed on ip that does not set its own.
func (id *Identity) applyIdentity(limits *tiers.Policy) {
	if limits == nil || id.IPv4Prefix == 0 && id.IPv6Prefix == 0 {
		return
	}
	for i := range limits.Rules {
		r := &limits.Rules[i]
		if !slices.Contains(r.Key, tiers.ScopeIP) {
			continue
		}
		if r.IPv4Prefix == 0 {
			r.IPv4Prefix = id.IPv4Prefix
		}
		if r.IPv6Prefix == 0 {
			r.IPv6Prefix = id.IPv6Prefix
		}
	}
}

// sameIdentity reports whether a reload's identity: section (nil: none)
// is the one the transport was built with.
func sameIdentity(built, f *Identity) bool {
	if f == nil {
		f = &Identity{}
	}
	return reflect.DeepEqual(*built, *f)
}
