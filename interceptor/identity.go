package interceptor

import (
	"context"
	"encoding/json"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"google.golang.org/grpc/metadata"
)

// isTrusted reports whether a is inside one of the trusted prefixes.
func isTrusted(trusted []netip.Prefix, a netip.Addr) bool {
	if !a.IsValid() {
		return false
	}
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// normalize drops the zone and unmaps IPv4-mapped IPv6 addresses, so one
// client has one address whatever the socket family.
func normalize(a netip.Addr) netip.Addr {
	return a.WithZone("").Unmap()
}

// addrFromNet returns the IP of a net.Addr without allocating for TCP and
// UDP addresses.
func addrFromNet(a net.Addr) netip.Addr {
	switch t := a.(type) {
	case *net.TCPAddr:
		return normalize(t.AddrPort().Addr())
	case *net.UDPAddr:
		return normalize(t.AddrPort().Addr())
	case nil:
		return netip.Addr{}
	}
	// Other address types (bufconn, unix sockets) carry no IP; only parse
	// those that say they are IP networks, so a failed parse (which
	// allocates its error) is not paid on every call.
	switch a.Network() {
	case "tcp", "tcp4", "tcp6", "udp", "udp4", "udp6", "ip", "ip4", "ip6":
		return parseHostAddr(a.String())
	}
	return netip.Addr{}
}

// parseHostAddr parses "ip", "ip:port" or "[ipv6]:port"; the zero Addr when
// s is none of them.
func parseHostAddr(s string) netip.Addr {
	if a, err := netip.ParseAddr(s); err == nil {
		return normalize(a)
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return normalize(ap.Addr())
	}
	if len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil {
			return normalize(a)
		}
	}
	return netip.Addr{}
}

// resolveXFF walks X-Forwarded-For values right to left, starting from a
// trusted peer, and returns the rightmost hop that is not a trusted proxy.
// When an entry cannot be parsed the walk stops at the last hop that was
// vouched for by a trusted proxy. values are the header's field lines in
// order; the peer is assumed trusted by the caller.
func resolveXFF(trusted []netip.Prefix, peer netip.Addr, values []string) netip.Addr {
	client := peer
	for i := len(values) - 1; i >= 0; i-- {
		v := values[i]
		for end := len(v); end >= 0; {
			start := strings.LastIndexByte(v[:end], ',') + 1
			hop := strings.TrimSpace(v[start:end])
			end = start - 1
			if hop == "" {
				continue
			}
			a := parseHostAddr(hop)
			if !a.IsValid() {
				return client
			}
			client = a
			if !isTrusted(trusted, a) {
				return client
			}
		}
	}
	return client
}

// resolveForwarded is resolveXFF for RFC 7239 Forwarded field values, using
// each element's for= parameter. An element without for=, or whose node is
// "unknown" or obfuscated, stops the walk.
func resolveForwarded(trusted []netip.Prefix, peer netip.Addr, values []string) netip.Addr {
	client := peer
	for i := len(values) - 1; i >= 0; i-- {
		elems := splitForwarded(values[i])
		for j := len(elems) - 1; j >= 0; j-- {
			node, ok := forwardedFor(elems[j])
			if !ok {
				return client
			}
			a := parseHostAddr(node)
			if !a.IsValid() {
				return client
			}
			client = a
			if !isTrusted(trusted, a) {
				return client
			}
		}
	}
	return client
}

// splitForwarded splits a Forwarded field value into its elements at commas
// outside quoted strings. Empty elements are dropped. A value whose quotes
// do not balance (or that ends inside a quoted-pair) is split at every
// comma instead: the client writes the start of the line and a proxy
// appends its element after a comma, so a quote the client left open must
// not swallow the element the proxy vouches for (the walk would stop at
// the proxy itself and hand the client the proxy's address). The
// client's malformed element then stops the walk, after the proxy's.
func splitForwarded(v string) []string {
	var out []string
	start, inQuote := 0, false
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case inQuote && c == '\\':
			i++ // quoted-pair
		case c == '"':
			inQuote = !inQuote
		case !inQuote && c == ',':
			if e := strings.TrimSpace(v[start:i]); e != "" {
				out = append(out, e)
			}
			start = i + 1
		}
	}
	if inQuote {
		out = out[:0]
		for e := range strings.SplitSeq(v, ",") {
			if e = strings.TrimSpace(e); e != "" {
				out = append(out, e)
			}
		}
		return out
	}
	if e := strings.TrimSpace(v[start:]); e != "" {
		out = append(out, e)
	}
	return out
}

// forwardedFor returns the unquoted value of the for= parameter of one
// Forwarded element (pairs separated by ';'). ok is false when there is no
// for= parameter, it is malformed, or it appears twice.
func forwardedFor(elem string) (string, bool) {
	var (
		found bool
		value string
	)
	for i := 0; i < len(elem); {
		// name
		eq := strings.IndexByte(elem[i:], '=')
		if eq < 0 {
			return "", false
		}
		name := strings.TrimSpace(elem[i : i+eq])
		i += eq + 1
		for i < len(elem) && (elem[i] == ' ' || elem[i] == '\t') {
			i++
		}
		var val string
		if i < len(elem) && elem[i] == '"' {
			var b strings.Builder
			i++
			closed := false
			for i < len(elem) {
				c := elem[i]
				if c == '\\' && i+1 < len(elem) {
					b.WriteByte(elem[i+1])
					i += 2
					continue
				}
				if c == '"' {
					closed = true
					i++
					break
				}
				b.WriteByte(c)
				i++
			}
			if !closed {
				return "", false
			}
			val = b.String()
			for i < len(elem) && (elem[i] == ' ' || elem[i] == '\t') {
				i++
			}
			if i < len(elem) && elem[i] != ';' {
				return "", false
			}
		} else {
			semi := strings.IndexByte(elem[i:], ';')
			if semi < 0 {
				semi = len(elem) - i
			}
			val = strings.TrimSpace(elem[i : i+semi])
			i += semi
		}
		if i < len(elem) && elem[i] == ';' {
			i++
		}
		if strings.EqualFold(name, "for") {
			if found {
				return "", false
			}
			found, value = true, val
		}
	}
	return value, found && value != ""
}

// clientIP resolves the client address from the immediate peer and, only
// when the peer is a trusted proxy, the configured forwarding header.
func (c *config) clientIP(peer netip.Addr, md Metadata) netip.Addr {
	if len(c.trusted) == 0 || !isTrusted(c.trusted, peer) {
		return peer
	}
	switch c.ipHeader {
	case Forwarded:
		return resolveForwarded(c.trusted, peer, md.Values("forwarded"))
	case XRealIP:
		if a := parseHostAddr(strings.TrimSpace(md.Get("x-real-ip"))); a.IsValid() {
			return a
		}
		return peer
	}
	return resolveXFF(c.trusted, peer, md.Values("x-forwarded-for"))
}

func firstMD(ctx context.Context, key string) string {
	v := metadata.ValueFromIncomingContext(ctx, key)
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

func valuesMD(ctx context.Context, key string) []string {
	return metadata.ValueFromIncomingContext(ctx, key)
}

func claimString(v any) string {
	switch t := v.(type) {
	case string:
		return t
	case float64:
		return strconv.FormatFloat(t, 'f', -1, 64)
	case int:
		return strconv.Itoa(t)
	case int64:
		return strconv.FormatInt(t, 10)
	case json.Number:
		return t.String()
	}
	return ""
}
