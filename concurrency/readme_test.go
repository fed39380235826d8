package concurrency_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/policyfile"
)

// docSection returns the section of the page (a path from the repository's
// root) under heading, up to the next heading of its level.
func docSection(t *testing.T, page, heading string) string {
	t.Helper()
	data, err := os.ReadFile("../" + page)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut("\n"+string(data), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("%s has no section %q", page, heading)
	}
	if i := strings.Index(section, "\n## "); i >= 0 {
		section = section[:i]
	}
	return section
}

// exampleSnippet returns the lines of file between the marker comments,
// one tab of indentation removed.
func exampleSnippet(t *testing.T, file, marker string) string {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(src), "// "+marker+":start\n")
	body, _, ok2 := strings.Cut(rest, "// "+marker+":end")
	if !ok || !ok2 {
		t.Fatalf("%s lacks the %s markers", file, marker)
	}
	var lines []string
	for line := range strings.Lines(strings.TrimRight(body, "\t")) {
		lines = append(lines, strings.TrimPrefix(line, "\t"))
	}
	return strings.Join(lines, "")
}

// TestReadmeWait: the waiting section of docs/overload.md shows
// ExampleWithWait's code verbatim (so it compiles and runs), and its
// policy loads with the waits it describes.
func TestReadmeWait(t *testing.T) {
	t.Parallel()
	section := docSection(t, "docs/overload.md", "## Waiting for a concurrency slot")
	snippet := exampleSnippet(t, "wait_example_test.go", "readme-wait")
	if !strings.Contains(section, "```go\n"+snippet+"```") {
		t.Errorf("docs/overload.md's section does not show ExampleWithWait's snippet verbatim:\n%s", snippet)
	}
	_, block, _ := strings.Cut(section, "```yaml\n")
	y, _, ok := strings.Cut(block, "```")
	if !ok {
		t.Fatal("no yaml block in the section")
	}
	f, err := policyfile.Load([]byte("rules: []\n" + y))
	if err != nil {
		t.Fatalf("the policy of docs/overload.md does not load: %v\n%s", err, y)
	}
	if f.Wait == nil || *f.Wait != (concurrency.Wait{Max: 50 * time.Millisecond, Queue: 200, Order: concurrency.LIFO}) ||
		f.Adaptive == nil || f.Adaptive.Wait.Max != 20*time.Millisecond {
		t.Errorf("the policy of docs/overload.md sets wait %+v, adaptive %+v", f.Wait, f.Adaptive)
	}
}
