package tiers_test

import (
	"os"
	"strings"
	"testing"
)

// TestReadmeInspect: docs/operators.md shows ExampleLimiter_Inspect's
// code verbatim, so the snippet compiles and runs.
func TestReadmeInspect(t *testing.T) {
	data, err := os.ReadFile("../docs/operators.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut("\n"+string(data), "\n## Inspect and reset a caller's buckets\n")
	if !ok {
		t.Fatal("docs/operators.md has no \"## Inspect and reset a caller's buckets\" heading")
	}
	if i := strings.Index(section, "\n## "); i >= 0 {
		section = section[:i]
	}
	src, err := os.ReadFile("inspect_example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(src), "// readme-inspect:start\n")
	body, _, ok := strings.Cut(rest, "// readme-inspect:end")
	if !ok {
		t.Fatal("inspect_example_test.go lacks the readme-inspect markers")
	}
	var snippet strings.Builder
	for line := range strings.Lines(strings.TrimRight(body, "\t")) {
		snippet.WriteString(strings.TrimPrefix(line, "\t"))
	}
	if !strings.Contains(section, "```go\n"+snippet.String()+"```") {
		t.Errorf("docs/operators.md does not show the example's snippet verbatim:\n%s", snippet.String())
	}
}
