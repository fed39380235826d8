package tiers

import (
	"crypto/sha256"
	"errors"
	"hash"
	"net/netip"

	"github.com/floodgate-go/floodgate"
)

// Key format (see the package doc):
//
//	keyed rule:    <prefix>{<scope0>=<v0>}:<rule>[:<scopeI>=<vI>]...:<algorithm>[:<period>]
//	no-key rule:   <prefix>{<rule>}:<algorithm>[:<period>]
//
// A scope is a scope name, or "header.<name>" for a header scope (names
// are [a-z0-9_.-]). The ":<period>" suffix ("1h", as Rate.String writes
// it) is there only for a window of a limit with several (Window), so the
// keys of every other limit are what they always were.
//
// Each value v is either the escaped identity component (every byte outside
// [A-Za-z0-9._-] written as %XX, upper-case hex) or, for API keys always
// and for other components longer than maxRawComponent bytes, '#' followed
// by 32 hex digits of the component's SHA-256. An IP component is the text
// of the network the address is in at the rule's prefix length (appendIP)
// before escaping. Escaped values never contain
// '#', ':', '=', '{' or '}', rule names never contain them either, so the
// format parses back uniquely (keys are injective in the identity) and the
// first "{...}" of a key, its Redis Cluster hash tag, is always ours.
// Only a gateway descriptor's entry may have the empty value (see
// keyBuilder.empty), written as nothing ("{header.x=}"): no other value
// escapes or hashes to nothing, so that bucket is its own.

const (
	defaultKeyPrefix = "fg:"
	// maxRawComponent is the longest identity component kept (escaped) in
	// keys; longer ones are hashed.
	maxRawComponent = 64
	hashBytes       = 16
)

const hexDigits = "0123456789ABCDEF"
const hexLower = "0123456789abcdef"

func unreserved(c byte) bool { return unreservedTab[c] }

// unreservedTab[c] reports whether c is in [A-Za-z0-9._-].
var unreservedTab = func() (t [256]bool) {
	for c := range 256 {
		t[c] = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
	}
	return t
}()

// keyBuilder holds the reusable state for building keys without
// allocating: a SHA-256 state and its output buffer, and room for an IP's
// text form.
type keyBuilder struct {
	h   hash.Hash
	sum [sha256.Size]byte
	ip  [64]byte
	// chunk feeds h from a string without converting it to a []byte
	// (which would allocate: the digest does not take strings).
	chunk [256]byte
	// empty holds a bit (1<<Scope) for each scope the request being keyed
	// has with the empty value (a gateway descriptor's entry "key: ''"),
	// which keys a bucket of its own, the component written as nothing;
	// for ScopeHeader, a header in Request.Headers with the empty value.
	// A service's request never has one: an empty component is missing.
	empty uint8
}

// blank reports whether the request has key scope j of rule r with the
// empty value (see keyBuilder.empty).
func (kb *keyBuilder) blank(j int, r *cRule, req *floodgate.Request) bool {
	s := r.key[j]
	if kb.empty&(1<<s) == 0 {
		return false
	}
	if s != ScopeHeader {
		return true
	}
	for i := range req.Headers {
		if h := &req.Headers[i]; h.Name == r.keyHeaders[j] && h.Value == "" {
			return true
		}
	}
	return false
}

func newKeyBuilder() *keyBuilder { return &keyBuilder{h: sha256.New()} }

// appendEscaped appends s escaped, or hashed when longer than
// maxRawComponent.
func (kb *keyBuilder) appendEscaped(b []byte, s string) []byte {
	if len(s) > maxRawComponent {
		return kb.appendHashed(b, s)
	}
	return appendEscapedRaw(b, s)
}

// appendEscapedRaw appends s with every byte outside [A-Za-z0-9._-]
// written as %XX. Runs of unreserved bytes are copied whole.
func appendEscapedRaw[S string | []byte](b []byte, s S) []byte {
	for {
		i := 0
		for i < len(s) && unreservedTab[s[i]] {
			i++
		}
		b = append(b, s[:i]...)
		if i == len(s) {
			return b
		}
		c := s[i]
		b = append(b, '%', hexDigits[c>>4], hexDigits[c&15])
		s = s[i+1:]
	}
}

// appendHashed appends '#' and the first hashBytes of SHA-256(s) in hex.
func (kb *keyBuilder) appendHashed(b []byte, s string) []byte {
	b = append(b, '#')
	return kb.appendDigest(b, s)
}

// appendDigest appends the first hashBytes of SHA-256(s) in hex.
func (kb *keyBuilder) appendDigest(b []byte, s string) []byte {
	var sum []byte
	if len(s) <= len(kb.chunk) {
		n := copy(kb.chunk[:], s)
		kb.sum = sha256.Sum256(kb.chunk[:n])
		sum = kb.sum[:]
	} else {
		kb.h.Reset()
		for len(s) > 0 {
			n := copy(kb.chunk[:], s)
			_, _ = kb.h.Write(kb.chunk[:n])
			s = s[n:]
		}
		sum = kb.h.Sum(kb.sum[:0])
	}
	for _, c := range sum[:hashBytes] {
		b = append(b, hexLower[c>>4], hexLower[c&15])
	}
	return b
}

// appendAPIKey appends '#' and the hashed form of an API key, from
// apiKeyHashes when the key was seen recently.
func (kb *keyBuilder) appendAPIKey(b []byte, s string) []byte {
	b = append(b, '#')
	h, b, ok := apiKeyHashes.lookup(b, s)
	if ok {
		return b
	}
	start := len(b)
	b = kb.appendDigest(b, s)
	apiKeyHashes.store(h, s, b[start:])
	return b
}

// component returns the raw identity component for key scope j of rule
// r, and false when the request does not have one (the rule then does not
// apply).
func (r *cRule) component(j int, req *floodgate.Request) (string, bool) {
	id := &req.Identity
	switch r.key[j] {
	case ScopeEndpoint:
		return req.Method, req.Method != ""
	case ScopeUser:
		return id.User, id.User != ""
	case ScopeAPIKey:
		return id.APIKey, id.APIKey != ""
	case ScopeTenant:
		return id.Tenant, id.Tenant != ""
	case ScopeHeader:
		return r.headerValue(j, req)
	}
	return "", false
}

// appendValue appends the key value for key scope j of rule r, reporting
// false when the request lacks that component. A header value is escaped
// or hashed like every other component.
func (kb *keyBuilder) appendValue(b []byte, j int, r *cRule, req *floodgate.Request) ([]byte, bool) {
	id := &req.Identity
	switch r.key[j] {
	case ScopeIP:
		if !id.IP.IsValid() {
			return b, kb.empty != 0 && kb.blank(j, r, req)
		}
		return appendEscapedRaw(b, kb.appendIP(kb.ip[:0], normIP(id.IP), r)), true
	case ScopeAPIKey:
		if id.APIKey == "" {
			return b, kb.empty != 0 && kb.blank(j, r, req)
		}
		return kb.appendAPIKey(b, id.APIKey), true
	}
	v, ok := r.component(j, req)
	if !ok {
		return b, kb.empty != 0 && kb.blank(j, r, req)
	}
	return kb.appendEscaped(b, v), true
}

// appendKeyBody appends the algorithm-independent part of a keyed rule's
// key: "{scope0=v0}:rule[:scopeI=vI]...". It returns false, and b
// unchanged in length, when the request lacks one of the scopes.
func (kb *keyBuilder) appendKeyBody(b []byte, r *cRule, req *floodgate.Request) ([]byte, bool) {
	start := len(b)
	b = append(b, r.head[len(r.prefix):]...)
	return kb.appendKeyValues(b, start, r, req)
}

// appendKeyValues appends the rest of a keyed rule's key body to b, which
// ends with the body's opening "{scope0=" (the start of the body is at
// b[start]), reporting false and b[:start] when the request lacks one of
// the scopes.
func (kb *keyBuilder) appendKeyValues(b []byte, start int, r *cRule, req *floodgate.Request) ([]byte, bool) {
	b, ok := kb.appendValue(b, 0, r, req)
	if !ok {
		return b[:start], false
	}
	b = append(b, r.mid...)
	for i := 1; i < len(r.key); i++ {
		b = append(b, r.scopeLabels[i]...)
		if b, ok = kb.appendValue(b, i, r, req); !ok {
			return b[:start], false
		}
	}
	return b, true
}

// ErrKeyPrefix is returned by NewLimiter for a key prefix that could break
// key parsing or choose a Redis Cluster hash tag.
var ErrKeyPrefix = errors.New("tiers: key prefix must be at most 64 bytes of [A-Za-z0-9._:-]")

func validKeyPrefix(p string) bool {
	if len(p) > 64 {
		return false
	}
	for i := 0; i < len(p); i++ {
		if !unreserved(p[i]) && p[i] != ':' {
			return false
		}
	}
	return true
}

// appendIP appends the text of the network a (normalised by normIP)
// belongs to at rule r's prefix length for its family: the address alone
// when the prefix is the whole address ("192.0.2.1"), else the masked
// prefix ("2001:db8:1:2::/64"). The two forms never meet (only a prefix
// has a '/'), nor do IPv4 and IPv6 texts (only IPv6 has a ':'), so
// distinct buckets have distinct texts.
func (kb *keyBuilder) appendIP(b []byte, a netip.Addr, r *cRule) []byte {
	bits := r.v6bits
	if a.Is4() {
		bits = r.v4bits
	}
	if bits >= a.BitLen() {
		return a.AppendTo(b)
	}
	p, err := a.Prefix(bits)
	if err != nil { // bits is validated at load; keep the whole address
		return a.AppendTo(b)
	}
	return p.AppendTo(b)
}
