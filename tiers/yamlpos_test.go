package tiers_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate/tiers"
)

// TestYAMLSyntaxErrorLines: a YAML syntax error names the line of the
// problem (yaml.v3's own line is that of the enclosing construct, and for
// parser errors counted from 0: the tab on line 3 came out as line 2, the
// mis-indent on line 4 as line 1). An unclosed bracket or quote is named at
// the line where it opened.
func TestYAMLSyntaxErrorLines(t *testing.T) {
	const rule = "rules:\n  - name: a\n"
	for _, tc := range []struct {
		name, yaml, msg string
		line            int
	}{
		// Tabs.
		{"tab indents a rule field", rule + "\tkey: [ip]\n", "found a tab character that violates indentation", 3},
		{"tab indents a tier", "tiers:\n  free: {rate: 1/1s}\n\tpro: {rate: 2/1s}\nrules: []\n", "found character that cannot start any token", 3},
		{"tab indents a list item", "rules:\n\t- name: a\n", "found character that cannot start any token", 2},
		{"tab after spaces, deep in the file", "# policy\n\n" + rule + "    key: [ip]\n    rate: 1/1s\n  - name: b\n  \t rate: 2/1s\n", "found a tab character that violates indentation", 8},
		{"tab after a multi-line flow list", rule + "    key: [\n      ip,\n      user,\n    ]\n    rate: 5/1m\n  - name: b\n\t  rate: 1/1s\n", "found a tab character that violates indentation", 9},

		// Indentation.
		{"rule field under-indented", rule + "    key: [ip]\n   rate: 5/1m\n", "did not find expected '-' indicator", 4},
		{"rule field over-indented", rule + "    key: [ip]\n      rate: 5/1m\n", "did not find expected key", 4},
		{"tier under-indented", "tiers:\n  free: {rate: 1/1s}\n  pro: {rate: 2/1s}\n pro2: {rate: 3/1s}\nrules: []\n", "did not find expected key", 4},
		{"second rule mis-indented after comments", "# c\n# c\n" + rule + "    rate: 1/1s\n    key: [ip]\n  - name: b\n    rate: 1/1s\n    key: [ip]\n   cost: 2\n", "did not find expected '-' indicator", 10},
		{"key without colon", rule + "  key\n", "could not find expected ':'", 3},
		{"colon in a plain value", "rules:\n  - name: a: b\n", "mapping values are not allowed in this context", 2},

		// Unclosed brackets and quotes.
		{"unclosed [ mid-file", rule + "    key: [ip, user\n    rate: 5/1m\n", "did not find expected ',' or ']'", 3},
		{"unclosed { mid-file", "tiers:\n  free: {rate: 1/1s\n  pro: {rate: 2/1s}\nrules: []\n", "did not find expected ',' or '}'", 2},
		{"unclosed { at the end", "rules: []\ntiers:\n  free: {rate: 1/1s, burst: 3\n", "did not find expected ',' or '}'", 3},
		{"unclosed [ on the first line", "rules: [\n", "did not find expected node content", 1},
		{"unclosed quote", rule + "    rate: 1/1s\n  - name: \"b\n    rate: 2/1s\n", "found unexpected end of stream", 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tiers.Load([]byte(tc.yaml))
			var pe *tiers.PolicyError
			if !errors.As(err, &pe) || len(pe.Errs) != 1 {
				t.Fatalf("Load = %v, want one syntax error", err)
			}
			fe := pe.Errs[0]
			if fe.Msg != "invalid YAML: "+tc.msg || fe.Line != tc.line {
				t.Errorf("Load = %q at line %d, want %q at line %d", fe.Msg, fe.Line, "invalid YAML: "+tc.msg, tc.line)
			}
			lines := strings.Split(tc.yaml, "\n")
			t.Logf("line %d: %q", fe.Line, lines[fe.Line-1])
		})
	}
}

// TestYAMLSyntaxErrorLineLargeFile: in a large policy (8,000 lines) whose
// mis-indent at the end yaml.v3 reports at line 1, the line Load names is
// still exact. That the search costs a bounded number of parses (counted,
// not timed) is internal/yamldoc's TestSyntaxLineParsesLargeFile, on the
// same document.
func TestYAMLSyntaxErrorLineLargeFile(t *testing.T) {
	var b strings.Builder
	b.WriteString("rules:\n")
	for i := range 4000 {
		fmt.Fprintf(&b, "  - name: r%d\n    rate: 1/1s\n", i)
	}
	b.WriteString("   cost: 2\n")
	_, err := tiers.Load([]byte(b.String()))
	var pe *tiers.PolicyError
	if !errors.As(err, &pe) || len(pe.Errs) != 1 {
		t.Fatalf("Load = %v, want one syntax error", err)
	}
	if fe := pe.Errs[0]; fe.Msg != "invalid YAML: did not find expected '-' indicator" || fe.Line != 8002 {
		t.Errorf("Load = %q at line %d, want the mis-indent at line 8002", fe.Msg, fe.Line)
	}
}
