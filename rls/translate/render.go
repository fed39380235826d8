package translate

import (
	"bytes"
	"fmt"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// sanitize keeps [A-Za-z0-9_.-] and replaces every other byte by '_'.
func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			b[i] = '_'
		}
	}
	return string(b)
}

// render writes the policy: a comment naming the inputs, then the YAML.
func (t *translator) render(files []File) ([]byte, error) {
	p := outPolicy{Rules: t.rules}
	if p.Rules == nil {
		p.Rules = []outRule{}
	}
	for _, d := range t.order {
		if len(t.mapping[d]) == 0 {
			continue
		}
		p.RLS = append(p.RLS, outDomain{Domain: d, Descriptors: t.mapping[d]})
	}
	var b bytes.Buffer
	names := make([]string, len(files))
	for i, f := range files {
		names[i] = f.Name
	}
	fmt.Fprintf(&b, "# floodgate policy translated from envoyproxy/ratelimit configuration: %s\n", strings.Join(names, ", "))
	b.WriteString("# Review the key scopes: a descriptor key without a value keys its rule on\n")
	b.WriteString("# that key's values (header:<key> unless mapped with -as), one bucket per value.\n")
	if t.opts.Consistency != "" {
		fmt.Fprintf(&b, "# consistency %s: every rule is decided locally against the store's budget\n", t.opts.Consistency)
		b.WriteString("# (tiers/localfirst), as a token bucket: N per unit is a bucket of N refilling\n")
		b.WriteString("# N per unit, not envoyproxy/ratelimit's fixed window (which admits up to 2N\n")
		if t.opts.Consistency == "async" {
			b.WriteString("# across a window's edge); async may admit over the limit within its bound\n")
			b.WriteString("# (see package tiers/localfirst).\n")
		} else {
			b.WriteString("# across a window's edge); leased never admits over the limit.\n")
		}
	}
	if t.usesIP {
		b.WriteString("# ip keys an IPv6 client by its /64 (floodgate's default; envoyproxy/ratelimit\n")
		b.WriteString("# counts each address): add ipv6_prefix: 128 to a rule to count each address.\n")
	}
	if len(t.metricsDropped) > 0 {
		sort.Strings(t.metricsDropped)
		b.WriteString("# Dropped (statistics only): " + strings.Join(t.metricsDropped, "; ") + "\n")
	}
	for _, w := range t.warnings {
		b.WriteString(WarningPrefix + w + "\n")
	}
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(p); err != nil {
		return nil, fmt.Errorf("translate: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("translate: %w", err)
	}
	return b.Bytes(), nil
}
