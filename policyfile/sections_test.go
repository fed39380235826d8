package policyfile_test

import (
	"context"
	"fmt"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/internal/field"
	"github.com/floodgate-go/floodgate/policyfile"
	"github.com/floodgate-go/floodgate/shedder"
	"github.com/floodgate-go/floodgate/shedder/fleetshed"
)

// A file whose shedder: or concurrency: section sets a stage Watch was
// not given is refused like any other mistake, with the line of each
// section: the rate limits stay as they were too.
func TestWatchRefusesSectionWithoutTarget(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	writeAtomic(t, path, `rules:
  - {name: new, key: [user], rate: 10/1s}
shedder:
  capacity: 40
  fleet: {capacity: 400}
concurrency:
  global: 100
  adaptive: {min: 2}
`)
	l := mustLimiter(t, newMemstore(t), "rules:\n  - {name: old, key: [user], rate: 1/1s}\n")
	reloads := make(chan reload, 4)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- policyfile.Watch(ctx, path, policyfile.Targets{Limits: l}, policyfile.WithInterval(5*time.Millisecond), policyfile.WithLogger(discardLogger()),
			policyfile.WithOnReload(func(f *policyfile.File, err error) { reloads <- reload{f, err} }))
	}()
	defer func() {
		cancel()
		<-done
	}()
	rl := nextReload(t, reloads)
	want := strings.Join([]string{
		"shedder: the file sets a Shedder's settings, but Watch was given none (Targets.Shedder), at line 4",
		"shedder.fleet: the file sets a Fleet's settings, but Watch was given none (Targets.Fleet), at line 5",
		"concurrency.global: the file sets a concurrency Limiter's settings, but Watch was given none (Targets.Concurrency), at line 7",
		"concurrency.adaptive: the file sets an adaptive limiter's settings, but Watch was given none (Targets.Adaptive), at line 8",
	}, "\n")
	if rl.f != nil || rl.err == nil || rl.err.Error() != want {
		t.Fatalf("reload: %v\nwant %s", rl.err, want)
	}
	if l.Policy().Rules[0].Name != "old" {
		t.Fatal("a refused file replaced the rate limits")
	}
}

// The rate-limit sections' mistakes and the stages' come in one error,
// in file order, and a syntax error names the line of the problem.
func TestLoadErrorsInFileOrder(t *testing.T) {
	_, err := policyfile.Load([]byte("shedder:\n  capacity: 0\nrules:\n  - {name: a, rate: 5/minute}\nconcurrency: {adaptive: {beta: 0.5}}\n"))
	want := `shedder.capacity: 0 must be at least 1, at line 2
rules[0].rate: "5/minute" is not N/duration (write 5/1m), at line 4
concurrency.adaptive.alpha: 3 and beta 0.5 must satisfy 1 <= alpha < beta (finite), at line 5`
	if err == nil || err.Error() != want {
		t.Fatalf("Load:\n got %v\nwant %s", err, want)
	}
	_, err = policyfile.Load([]byte("rules: []\nshedder:\n  capacity: 1\n\tthresholds: {}\n"))
	if err == nil || !strings.HasSuffix(err.Error(), "at line 4") {
		t.Fatalf("Load with a tab: %v, want the tab's line 4", err)
	}
	if _, err := policyfile.LoadFile(filepath.Join(t.TempDir(), "none.yaml")); err == nil || !strings.HasPrefix(err.Error(), "policyfile: read policy: ") {
		t.Fatalf("LoadFile of a missing file: %v", err)
	}
}

// TestDocumentedSchema: the package documentation lists every key the
// decoder accepts in the shedder:, concurrency: and identity: sections, and no
// other, with values that load.
func TestDocumentedSchema(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "doc.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	doc := f.Doc.Text()
	_, rest, ok := strings.Cut(doc, "# The shedder:, concurrency: and identity: sections\n")
	if !ok {
		t.Fatal("no schema heading in the package documentation")
	}
	var block []string
	for line := range strings.Lines(rest) {
		if strings.HasPrefix(line, "\t") {
			block = append(block, line[1:])
		} else if len(block) > 0 && strings.TrimSpace(line) != "" {
			break
		}
	}
	y := strings.Join(block, "")
	if _, err := policyfile.Load([]byte("rules: []\n" + y)); err != nil {
		t.Fatalf("the documented sections do not load: %v\n%s", err, y)
	}
	var root yaml.Node
	if err := yaml.Unmarshal([]byte(y), &root); err != nil {
		t.Fatal(err)
	}
	documented := map[string][]string{}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		if n.Kind == yaml.SequenceNode { // a list's items, under the list's path
			for _, item := range n.Content {
				walk(item, path)
			}
			return
		}
		if n.Kind != yaml.MappingNode {
			return
		}
		if policyfile.FreeForm[path] {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i].Value
			if path != "" {
				documented[path] = append(documented[path], k)
			}
			walk(n.Content[i+1], strings.TrimPrefix(path+"."+k, "."))
		}
	}
	walk(root.Content[0], "")
	for path, keys := range policyfile.Schema {
		got := slices.Compact(slices.Sorted(slices.Values(documented[path])))
		want := slices.Sorted(slices.Values(keys))
		if !slices.Equal(got, want) {
			t.Errorf("%s: documented keys %v, the decoder's %v", path, got, want)
		}
		delete(documented, path)
	}
	for path := range documented {
		t.Errorf("%s: documented, not decoded", path)
	}
}

// A file over 4 MiB is refused before it is parsed.
func TestLoadTooLarge(t *testing.T) {
	data := []byte("rules: []\n" + strings.Repeat("#", 4<<20))
	if _, err := policyfile.Load(data); err == nil || err.Error() != "policy is larger than 4194304 bytes" {
		t.Fatalf("Load of %d bytes: %v", len(data), err)
	}
}

// The stages report every bad field of what the policy file sets with its
// key path, so the loader needs no message parsing.
func TestStagesReportPaths(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want []string
	}{
		{shedder.Config{Capacity: 0, Thresholds: shedder.Thresholds{Test: 0.9, Read: 0.5, Write: 0.7}, Adaptive: &shedder.AdaptiveCapacity{Min: 10, Max: 5, CPUTarget: 2}}.Validate(),
			[]string{"capacity", "thresholds", "adaptive.max", "adaptive.cpu_target"}},
		{fleetshed.Config{Capacity: 1, Reserve: 2, Adaptive: &shedder.AdaptiveCapacity{Tolerance: 1}}.Validate(),
			[]string{"reserve", "adaptive.tolerance"}},
		{concurrency.AdaptiveConfig{MinSamples: -1, Alpha: 7, Beta: 2}.Validate(), []string{"min_samples", "alpha"}},
	} {
		fields, other := field.Split(tc.err)
		var got []string
		for _, fe := range fields {
			got = append(got, fe.Path)
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) || len(other) != 0 {
			t.Errorf("%v: paths %v (and %v), want %v", tc.err, got, other, tc.want)
		}
	}
}
