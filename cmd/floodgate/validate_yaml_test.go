package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestValidateNamesTheLineOfYAMLSyntaxErrors: `floodgate validate` prints
// the line of the problem, not yaml.v3's (line 2 for the tab on line 3,
// line 1 for the mis-indent on line 4).
func TestValidateNamesTheLineOfYAMLSyntaxErrors(t *testing.T) {
	dir := t.TempDir()
	files := []struct{ name, yaml, want string }{
		{"tab.yaml", "rules:\n  - name: a\n\tkey: [ip]\n", "invalid YAML: found a tab character that violates indentation, at line 3"},
		{"indent.yaml", "rules:\n  - name: a\n    key: [ip]\n   rate: 5/1m\n", "invalid YAML: did not find expected '-' indicator, at line 4"},
		{"bracket.yaml", "rules:\n  - name: a\n    key: [ip, user\n    rate: 5/1m\n", "invalid YAML: did not find expected ',' or ']', at line 3"},
	}
	args := []string{"validate"}
	for _, f := range files {
		path := filepath.Join(dir, f.name)
		if err := os.WriteFile(path, []byte(f.yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, path)
	}
	var out, errOut bytes.Buffer
	if code := run(args, &out, &errOut); code != 1 {
		t.Fatalf("exit code %d, want 1; stderr:\n%s", code, errOut.String())
	}
	for _, f := range files {
		want := filepath.Join(dir, f.name) + ": invalid\n  " + f.want + "\n"
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("stderr lacks\n%s\ngot:\n%s", want, errOut.String())
		}
	}
}
