package tiers_test

import (
	"os"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate/tiers"
)

// TestReadmeShapingPolicies: the YAML of the settlement, meters and
// max_wait sections of docs/policy.md loads, and says what the sections say it does.
func TestReadmeShapingPolicies(t *testing.T) {
	data, err := os.ReadFile("../docs/policy.md")
	if err != nil {
		t.Fatal(err)
	}
	for heading, check := range map[string]func(p *tiers.Policy) bool{
		"## Charge after the response: settlement\n": func(p *tiers.Policy) bool { return p.Rules[0].Settle },
		"## Shape instead of deny: max_wait\n":       func(p *tiers.Policy) bool { return p.Rules[0].MaxWait > 0 && p.Rules[0].MaxWaiters == 32 },
		"### Several meters: input and output tokens\n": func(p *tiers.Policy) bool {
			return len(p.Rules) == 3 && p.Rules[0].Meter == "" && p.Rules[1].Meter == "input_tokens" && p.Rules[2].Meter == "output_tokens" && p.Rules[2].Cost == 1000 && p.Rules[1].Settle && p.Rules[2].Settle
		},
	} {
		_, section, ok := strings.Cut(string(data), "\n"+heading)
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
		p, err := tiers.Load([]byte(y))
		if err != nil {
			t.Errorf("the policy of docs/policy.md section %q does not load: %v\n%s", heading, err, y)
			continue
		}
		if !check(p) {
			t.Errorf("the policy of docs/policy.md section %q does not set what the section is about: %+v", heading, p.Rules)
		}
	}
}
