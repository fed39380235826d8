package yamldoc

import (
	"fmt"
	"math/bits"
	"strings"
	"testing"
)

// TestSyntaxLineParsesLargeFile: in a policy of 8,002 lines whose
// mis-indent on the last line yaml.v3 reports at line 1, the search finds
// the exact line in a number of prefix parses logarithmic in the distance
// (a doubling stride from line 1 to past 8,002, then bisecting the last
// stride: at most 2*ceil(log2(8002))+1 parses), every one of them counted
// here rather than timed, and within yamlSearchBudget bytes.
func TestSyntaxLineParsesLargeFile(t *testing.T) {
	var b strings.Builder
	b.WriteString("rules:\n")
	for i := range 4000 {
		fmt.Fprintf(&b, "  - name: r%d\n    rate: 1/1s\n", i)
	}
	b.WriteString("   cost: 2\n")
	data := []byte(b.String())
	const msg = "invalid YAML: did not find expected '-' indicator"
	if !prefixFails(data, msg) {
		t.Fatalf("the document does not fail with %q", msg)
	}
	parses, parsed := 0, 0
	count := func(prefix []byte, msg string) bool {
		parses++
		parsed += len(prefix)
		return prefixFails(prefix, msg)
	}
	if got := syntaxLine(data, msg, 1, count); got != 8002 {
		t.Fatalf("syntaxLine = %d, want the mis-indent at line 8002", got)
	}
	if limit := 2*bits.Len(8002) + 1; parses > limit || parsed > yamlSearchBudget {
		t.Errorf("the search parsed %d prefixes (%d bytes), want at most %d prefixes and %d bytes", parses, parsed, limit, yamlSearchBudget)
	}
	t.Logf("%d prefixes parsed, %d bytes in all (the document is %d)", parses, parsed, len(data))
}
