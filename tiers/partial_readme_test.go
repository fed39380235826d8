package tiers_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// docYAML returns the first yaml block of the section under heading of a
// documentation page (a path from the repository's root: docs/policy.md).
func docYAML(t *testing.T, page, heading string) string {
	t.Helper()
	data, err := os.ReadFile("../" + page)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut("\n"+string(data), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("%s has no section %q", page, heading)
	}
	if i := strings.Index(section, "\n#"); i >= 0 {
		section = section[:i]
	}
	_, block, ok := strings.Cut(section, "```yaml\n")
	y, _, closed := strings.Cut(block, "```")
	if !ok || !closed {
		t.Fatalf("section %q has no yaml block", heading)
	}
	return y
}

// The calendar policy of docs/policy.md loads with what the section says: a
// monthly rule in Europe/Berlin and a weekly one starting Monday, both
// fixed windows.
func TestReadmeCalendarPolicy(t *testing.T) {
	p, err := tiers.Load([]byte(docYAML(t, "docs/policy.md", "## Plan quotas: calendar windows")))
	if err != nil {
		t.Fatal(err)
	}
	m, w := p.Rules[0], p.Rules[1]
	if m.Rate.Calendar != tiers.CalendarMonth || m.Rate.N != 50000 || m.TimeZone != "Europe/Berlin" || m.Algorithm.String() != "fixed_window" ||
		w.Rate.Calendar != tiers.CalendarWeek || w.WeekStarts != time.Monday {
		t.Fatalf("rules %+v", p.Rules)
	}
}

// The partial-grant policy and snippet of docs/policy.md: a batch of 150
// events from a user is granted the user's 100; the user's next batch,
// nothing. The snippet between the markers is the page's, verbatim.
func TestReadmePartialPolicy(t *testing.T) {
	clk := clock.New(time.Unix(1_800_000_000, 0))
	limits := mustLimiter(t, newMemstore(t, memstore.WithClock(clk)), docYAML(t, "docs/policy.md", "## Partial grants for batch endpoints"), tiers.WithClock(clk))
	ctx := context.Background()
	batch := make([]string, 150)
	id := floodgate.Identity{Tenant: "acme", User: "ann"}
	var ingested []string
	ingest := func(events []string) { ingested = events }

	// readme-partial:start
	r := &floodgate.Request{Method: "/events.v1.Ingest/Batch", Cost: int64(len(batch)), Identity: id}
	granted, d, err := limits.AdmitAtMost(ctx, r)
	ingest(batch[:granted]) // 0 when denied: d.RetryAfter is the wait for one
	// readme-partial:end

	if err != nil || granted != 100 || !d.Allowed || len(ingested) != 100 {
		t.Fatalf("first batch: %d, %+v, %v; want 100 granted and ingested", granted, d, err)
	}
	granted, d, err = limits.AdmitAtMost(ctx, r)
	if err != nil || granted != 0 || d.Allowed || d.RetryAfter != 10*time.Millisecond {
		t.Fatalf("second batch: %d, %+v, %v; want nothing, one unit in 10ms", granted, d, err)
	}

	src, err := os.ReadFile("partial_readme_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(src), "// readme-partial:start\n")
	body, _, _ := strings.Cut(rest, "\t// readme-partial:end")
	var snippet strings.Builder
	for line := range strings.Lines(body) {
		snippet.WriteString(strings.TrimPrefix(line, "\t"))
	}
	data, err := os.ReadFile("../docs/policy.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "```go\n"+snippet.String()+"```") {
		t.Errorf("the partial-grant section of docs/policy.md does not show this test's snippet verbatim:\n%s", snippet.String())
	}
}
