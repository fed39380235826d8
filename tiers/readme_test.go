package tiers_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// TestReadmePolicies: the YAML policy of each section of docs/policy.md
// named here loads, so the documented syntax is the syntax.
func TestReadmePolicies(t *testing.T) {
	data, err := os.ReadFile("../docs/policy.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, heading := range []string{"# The policy\n", "## Several windows per limit\n", "## Matching and keying on headers\n", "## Dark launch and gradual roll-out\n", "## Soft limits (quota mode)\n"} {
		_, section, ok := strings.Cut("\n"+string(data), "\n"+heading)
		if !ok {
			t.Errorf("docs/policy.md has no section %q", heading)
			continue
		}
		if i := strings.Index(section, "\n#"); i >= 0 {
			section = section[:i]
		}
		_, block, ok := strings.Cut(section, "```yaml\n")
		y, _, closed := strings.Cut(block, "```")
		if !ok || !closed {
			t.Errorf("section %q has no yaml block", heading)
			continue
		}
		if _, err := tiers.Load([]byte(y)); err != nil {
			t.Errorf("the policy of docs/policy.md section %q does not load: %v\n%s", heading, err, y)
		}
	}
}

// TestReadmeOneSlot: the one-slot policy of docs/redis.md loads, and every bucket
// of a request with all identity components shares one Redis Cluster hash
// tag, its tenant's.
func TestReadmeOneSlot(t *testing.T) {
	y := docYAML(t, "docs/redis.md", "## One slot per request")
	p, err := tiers.Load([]byte(y))
	if err != nil {
		t.Fatalf("the policy does not load: %v\n%s", err, y)
	}
	store, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	l, err := tiers.NewLimiter(store, p)
	if err != nil {
		t.Fatal(err)
	}
	r := &floodgate.Request{Method: "/shop.v1.Cart/Add", Identity: floodgate.Identity{Tenant: "acme", User: "alice", APIKey: "k-1"}}
	states, err := l.Inspect(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if len(states) != len(p.Rules) {
		t.Fatalf("%d buckets for %d rules: %+v", len(states), len(p.Rules), states)
	}
	// Keys are <prefix>{<scope0>=<v0>}:... (the package doc): the first
	// "{...}", the Redis Cluster hash tag, is the tenant's in every key.
	for _, st := range states {
		if !strings.HasPrefix(st.Key, "fg:{tenant=acme}:") {
			t.Errorf("rule %s: key %q does not start with the tenant's hash tag {tenant=acme}", st.Rule, st.Key)
		}
	}
}
