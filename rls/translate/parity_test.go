package translate_test

import (
	"context"
	"testing"

	"github.com/floodgate-go/floodgate/rls/translate"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// admitTranslated translates cfg and decides one call of descriptors (each a
// list of key, value pairs) n times; it returns how many were denied.
func admitTranslated(t *testing.T, cfg string, n int, descs ...[]string) int {
	t.Helper()
	out, err := translate.Translate([]translate.File{{Name: "c.yaml", Data: []byte(cfg)}}, translate.Options{})
	if err != nil {
		t.Fatalf("translate: %v", err)
	}
	t.Logf("translation:\n%s", out)
	p, err := tiers.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	store, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	l, err := tiers.NewLimiter(store, p)
	if err != nil {
		t.Fatal(err)
	}
	denied := 0
	for range n {
		ds := make([]tiers.Descriptor, len(descs))
		for i, kv := range descs {
			for j := 0; j+1 < len(kv); j += 2 {
				ds[i].Entries = append(ds[i].Entries, tiers.DescriptorEntry{Key: kv[j], Value: kv[j+1]})
			}
		}
		outd := make([]tiers.DescriptorDecision, len(ds))
		d, err := l.AdmitDescriptors(context.Background(), "edge", ds, outd)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			denied++
		}
	}
	return denied
}

// In envoyproxy/ratelimit a descriptor with a value and no rate_limit
// (and no children) matches its value and sets no limit: that value is
// not limited, whatever its key's any-value sibling says (GetLimit finds
// "remote_address_10.0.0.1" and never falls back to "remote_address"), and
// so does the translation (it dropped the descriptor, and the sibling
// limited the value).
func TestValueWithoutRateLimitIsUnlimited(t *testing.T) {
	cfg := `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: remote_address
    value: 10.0.0.1
`
	if denied := admitTranslated(t, cfg, 5, []string{"remote_address", "10.0.0.1"}); denied != 0 {
		t.Fatalf("remote_address=10.0.0.1: %d of 5 calls denied; envoyproxy/ratelimit sets no limit for it", denied)
	}
}

// Envoy's masked_remote_address action sends a network
// ("192.0.2.0/24" with v4_prefix_mask_len: 24); envoyproxy/ratelimit
// counts each value, and so does the translation (it keyed ip with the
// default /32 prefix, so a /24 value keyed nothing and was never limited).
func TestMaskedRemoteAddressCountedPerValue(t *testing.T) {
	cfg := `
domain: edge
descriptors:
  - key: masked_remote_address
    rate_limit: {unit: minute, requests_per_unit: 2}
`
	if denied := admitTranslated(t, cfg, 5, []string{"masked_remote_address", "192.0.2.0/24"}); denied != 3 {
		t.Fatalf("masked_remote_address=192.0.2.0/24: %d of 5 calls denied at 2/minute, want 3", denied)
	}
}
