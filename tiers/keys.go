package tiers

import (
	"crypto/sha256"
	"errors"
	"hash"
	"net/netip"
)

// Key format (see the package doc):
//
//	keyed rule:    <prefix>{<scope0>=<v0>}:<rule>[:<scopeI>=<vI>]...:<algorithm>
//	no-key rule:   <prefix>{<rule>}:<algorithm>
//
// Each value v is either the escaped identity component (every byte outside
// [A-Za-z0-9._-] written as %XX, upper-case hex) or, for API keys always
// and for other components longer than maxRawComponent bytes, '#' followed
// by 32 hex digits of the component's SHA-256. Escaped values never contain
// '#', ':', '=', '{' or '}', rule names never contain them either, so the
// format parses back uniquely (keys are injective in the identity) and the
// first "{...}" of a key, its Redis Cluster hash tag, is always ours.

const (
	defaultKeyPrefix = "fg:"
	// maxRawComponent is the longest identity component kept (escaped) in
	// keys; longer ones are hashed.
	maxRawComponent = 64
	hashBytes       = 16
)

const hexDigits = "0123456789ABCDEF"
const hexLower = "0123456789abcdef"

func unreserved(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
}

// keyBuilder holds the reusable state for building keys without
// allocating: a SHA-256 state and its output buffer, and room for an IP's
// text form.
type keyBuilder struct {
	h   hash.Hash
	sum [sha256.Size]byte
	ip  [64]byte
}

func newKeyBuilder() *keyBuilder { return &keyBuilder{h: sha256.New()} }

// appendEscaped appends s escaped, or hashed when longer than
// maxRawComponent.
func (kb *keyBuilder) appendEscaped(b []byte, s string) []byte {
	if len(s) > maxRawComponent {
		return kb.appendHashed(b, s)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if unreserved(c) {
			b = append(b, c)
		} else {
			b = append(b, '%', hexDigits[c>>4], hexDigits[c&15])
		}
	}
	return b
}

// appendHashed appends '#' and the first hashBytes of SHA-256(s) in hex.
func (kb *keyBuilder) appendHashed(b []byte, s string) []byte {
	kb.h.Reset()
	if sw, ok := kb.h.(interface{ WriteString(string) (int, error) }); ok {
		_, _ = sw.WriteString(s)
	} else {
		_, _ = kb.h.Write([]byte(s))
	}
	sum := kb.h.Sum(kb.sum[:0])
	b = append(b, '#')
	for _, c := range sum[:hashBytes] {
		b = append(b, hexLower[c>>4], hexLower[c&15])
	}
	return b
}

// component returns the raw identity component for scope s, and false when
// the request does not have one (the rule then does not apply).
func component(s Scope, method string, id *identityView) (string, bool) {
	switch s {
	case ScopeEndpoint:
		return method, method != ""
	case ScopeUser:
		return id.user, id.user != ""
	case ScopeAPIKey:
		return id.apiKey, id.apiKey != ""
	case ScopeTenant:
		return id.tenant, id.tenant != ""
	}
	return "", false
}

// identityView is the part of a request keys are built from.
type identityView struct {
	user, apiKey, tenant string
	ip                   netip.Addr
}

// appendValue appends the key value for scope s, reporting false when the
// request lacks that component.
func (kb *keyBuilder) appendValue(b []byte, s Scope, method string, id *identityView) ([]byte, bool) {
	switch s {
	case ScopeIP:
		if !id.ip.IsValid() {
			return b, false
		}
		txt := id.ip.AppendTo(kb.ip[:0])
		for _, c := range txt {
			if unreserved(c) {
				b = append(b, c)
			} else {
				b = append(b, '%', hexDigits[c>>4], hexDigits[c&15])
			}
		}
		return b, true
	case ScopeAPIKey:
		if id.apiKey == "" {
			return b, false
		}
		return kb.appendHashed(b, id.apiKey), true
	}
	v, ok := component(s, method, id)
	if !ok {
		return b, false
	}
	return kb.appendEscaped(b, v), true
}

// appendKeyBody appends the algorithm-independent part of a keyed rule's
// key: "{scope0=v0}:rule[:scopeI=vI]...". It returns false, and b
// unchanged in length, when the request lacks one of the scopes.
func (kb *keyBuilder) appendKeyBody(b []byte, r *cRule, method string, id *identityView) ([]byte, bool) {
	start := len(b)
	b = append(b, '{')
	b = append(b, r.scopeLabels[0]...)
	b, ok := kb.appendValue(b, r.key[0], method, id)
	if !ok {
		return b[:start], false
	}
	b = append(b, r.mid...)
	for i := 1; i < len(r.key); i++ {
		b = append(b, r.scopeLabels[i]...)
		if b, ok = kb.appendValue(b, r.key[i], method, id); !ok {
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

// mustAddr parses an address already validated by keyValue.
func mustAddr(v string) netip.Addr {
	a, _ := netip.ParseAddr(v)
	return a
}
