package tiers_test

import (
	"os"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate/tiers"
)

// TestReadmePolicies: every YAML policy of the top README.md's policy
// sections loads, so the documented syntax is the syntax.
func TestReadmePolicies(t *testing.T) {
	data, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, heading := range []string{"## The policy\n", "### Several windows per limit\n", "### Matching and keying on headers\n", "### Dark launch and gradual roll-out\n"} {
		_, section, ok := strings.Cut(string(data), "\n"+heading)
		if !ok {
			t.Errorf("README.md has no section %q", heading)
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
			t.Errorf("the policy of README section %q does not load: %v\n%s", heading, err, y)
		}
	}
}
