// Package yamldoc reads a policy file as YAML: exactly one document, at
// most a given size, with the line of a syntax error where the problem is
// rather than where yaml.v3 says. Package tiers decodes its sections from
// the tree, and package policyfile the rest of the file. It imports
// yaml.v3 and nothing of floodgate.
package yamldoc

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// MaxSize is the largest policy file, in bytes, that package tiers and
// package policyfile load.
const MaxSize = 4 << 20

// Error is what is wrong with a file as YAML, and the line (0 when
// unknown).
type Error struct {
	// Msg says what is wrong ("invalid YAML: ...", "policy is empty").
	Msg string
	// Line is the line of the problem, from 1; 0 when unknown.
	Line int
}

// ReadFile reads the file at path, refusing one larger than MaxSize.
// Its errors start with pkg ("tiers: read policy: open ...").
func ReadFile(pkg, path string) ([]byte, error) {
	const limit = MaxSize
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: read policy: %w", pkg, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("%s: read policy %s: %w", pkg, path, err)
	}
	if len(data) > limit {
		return nil, fmt.Errorf("%s: policy %s is larger than %d bytes", pkg, path, limit)
	}
	return data, nil
}

// Parse parses exactly one YAML document of at most MaxSize bytes and
// returns its content: the root node of the policy.
func Parse(data []byte) (root *yaml.Node, e *Error) {
	if len(data) > MaxSize {
		return nil, &Error{Msg: fmt.Sprintf("policy is larger than %d bytes", MaxSize)}
	}
	defer func() {
		// yaml.v3 has panicked on hostile input in the past; a policy
		// loader must report, never crash a reload loop. Only the YAML
		// parser is guarded: the walks of the tree are fuzzed unguarded.
		if r := recover(); r != nil {
			root, e = nil, &Error{Msg: fmt.Sprintf("invalid YAML: %v", r)}
		}
	}()
	doc := &yaml.Node{}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{Msg: "policy is empty"}
		}
		return nil, syntaxError(data, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		line := 0
		if err == nil {
			line = extra.Line
		}
		return nil, &Error{Msg: "a policy is one YAML document; found another", Line: line}
	}
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		doc = doc.Content[0]
	}
	return doc, nil
}

// yamlError turns "yaml: line 3: did not find ..." into an Error with the
// line in its Line.
func yamlError(err error) *Error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if num, text, ok := strings.Cut(rest, ": "); ok {
			if n, err := strconv.Atoi(num); err == nil && n > 0 {
				return &Error{Msg: "invalid YAML: " + text, Line: n}
			}
		}
	}
	return &Error{Msg: "invalid YAML: " + msg}
}
