package tiers_test

import (
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate"
)

const fuzzHeaderPolicy = `
rules:
  - {name: h, key: [header:x-k], rate: 1/1s}
  - {name: th, key: [tenant, header:x-k], rate: 1/1s}
  - {name: w, key: [header:x-k, user], rate: [1/1s, 2/1h]}
  - {name: m, match: {header: {x-k: [mobile]}}, rate: 1/1s}
`

// FuzzHeaderKey: header values, whatever bytes a client sends, never make
// two different values share a key, never choose the hash tag or add a
// brace, and keep keys to the format's characters; a header match matches
// exactly its value.
func FuzzHeaderKey(f *testing.F) {
	f.Add("eu", "us", "acme")
	f.Add("eu:x=y", "eu%3Ax%3Dy", "a")
	f.Add("}{", "%7D%7B", "}")
	f.Add(strings.Repeat("é", 40), strings.Repeat("é", 41), "t")
	f.Add("#"+strings.Repeat("0", 32), strings.Repeat("z", 65), "")
	f.Add("mobile", "mobile ", "x")
	f.Add("a\r\nb", "a\x00b", "\xff")
	l := mustLimiter(f, newMemstore(f), fuzzHeaderPolicy)
	allowed := func(c byte) bool {
		return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._-%#:={}", c) >= 0
	}
	resolve := func(t *testing.T, v, tenant string) map[string]string {
		r := &floodgate.Request{Method: "/a.B/C", Identity: floodgate.Identity{Tenant: tenant, User: "u"}}
		if v != "" {
			r.Headers = []floodgate.Header{{Name: "x-k", Value: v}}
		}
		out := map[string]string{}
		for _, b := range l.Buckets(nil, r) {
			k := b.Key
			for i := 0; i < len(k); i++ {
				if !allowed(k[i]) {
					t.Fatalf("key %q has byte %q", k, k[i])
				}
			}
			if strings.Count(k, "{") != 1 || strings.Count(k, "}") != 1 || !strings.HasPrefix(k, "fg:{") {
				t.Fatalf("key %q does not have exactly one hash tag at the front", k)
			}
			tag := k[len("fg:{"):strings.IndexByte(k, '}')]
			want := "header.x-k=" + refEscape(v)
			if b.Rule == "th" {
				want = "tenant=" + refEscape(tenant)
			}
			if b.Rule == "m" {
				want = "m"
			}
			if tag != want {
				t.Fatalf("key %q of rule %s: tag %q, want %q", k, b.Rule, tag, want)
			}
			if _, dup := out[k]; dup {
				t.Fatalf("key %q twice", k)
			}
			out[k] = b.Rule
		}
		if _, ok := out["fg:{m}:token_bucket"]; ok != (v == "mobile") {
			t.Fatalf("header %q: match rule applied %v", v, ok)
		}
		if want := 2; v != "" && len(out) < 2 {
			t.Fatalf("header %q: %d buckets, want at least %d", v, len(out), want)
		}
		return out
	}
	f.Fuzz(func(t *testing.T, a, b, tenant string) {
		ka := resolve(t, a, tenant)
		kb := resolve(t, b, tenant)
		if a == b {
			return
		}
		for k, rule := range ka {
			if rule == "m" {
				continue
			}
			if _, shared := kb[k]; shared {
				t.Fatalf("header values %q and %q share key %q", a, b, k)
			}
		}
	})
}
