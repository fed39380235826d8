package rls_test

import (
	"os"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate/tiers"
)

// The policy README.md shows loads, mapping and all.
func TestReadmePolicyLoads(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "## The mapping")
	if !ok {
		t.Fatal("README.md has no mapping section")
	}
	_, rest, _ = strings.Cut(rest, "```yaml\n")
	yaml, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatal("no YAML block in the mapping section")
	}
	p, err := tiers.Load([]byte(yaml))
	if err != nil {
		t.Fatalf("README policy:\n%v", err)
	}
	if len(p.RLS) != 1 || len(p.RLS[0].Descriptors) != 7 {
		t.Fatalf("README policy maps %v", p.RLS)
	}
}
