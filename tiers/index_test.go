package tiers_test

import (
	"slices"
	"testing"

	"github.com/floodgate-go/floodgate"
)

// TestRuleIndexKeepsOrder: the rules a request's method can match are
// found through the index by method (exact methods, globs and rules
// without a method interleaved), and come in the policy's order, most
// specific first, exactly as a scan of the whole list gives them.
func TestRuleIndexKeepsOrder(t *testing.T) {
	l := mustLimiter(t, newMemstore(t), `
rules:
  - {name: any-1, rate: 10/1s}
  - {name: exact-a, match: {method: /s.v1.S/A}, rate: 10/1s}
  - {name: glob-s, match: {method: "/s.v1.S/*"}, rate: 10/1s}
  - {name: exact-b, match: {method: /s.v1.S/B}, rate: 10/1s}
  - {name: exact-a-user, match: {method: /s.v1.S/A}, key: [user], rate: 10/1s}
  - {name: any-user, key: [user], rate: 10/1s}
  - {name: exact-a-2, match: {method: /s.v1.S/A}, rate: 10/1s}
  - {name: glob-t, match: {method: "/t.v1.T/*"}, rate: 10/1s}
`)
	for _, c := range []struct {
		method string
		want   []string
	}{
		{"/s.v1.S/A", []string{"exact-a-user", "any-user", "any-1", "exact-a", "glob-s", "exact-a-2"}},
		{"/s.v1.S/B", []string{"any-user", "any-1", "glob-s", "exact-b"}},
		{"/t.v1.T/X", []string{"any-user", "any-1", "glob-t"}},
		{"/u.v1.U/X", []string{"any-user", "any-1"}},
	} {
		r := &floodgate.Request{Method: c.method, Identity: floodgate.Identity{User: "u"}}
		var got []string
		for _, b := range l.Buckets(nil, r) {
			got = append(got, b.Rule)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: rules %q, want %q", c.method, got, c.want)
		}
	}
}
