package main

import (
	"fmt"
	"strings"

	extrlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"go.yaml.in/yaml/v3"
)

// The differential test reads the envoyproxy/ratelimit configurations
// itself, only to classify a difference: whether a descriptor is in
// shadow mode, and which counter envoyproxy/ratelimit charges (a
// share_threshold wildcard makes every value matching it one counter).
// It never predicts an answer: both answers come from the services.

// rlNode is one node of a configuration's descriptor tree.
type rlNode struct {
	Key         string    `yaml:"key"`
	Value       string    `yaml:"value"`
	Shadow      bool      `yaml:"shadow_mode"`
	Share       bool      `yaml:"share_threshold"`
	RateLimit   *struct{} `yaml:"rate_limit"`
	Descriptors []*rlNode `yaml:"descriptors"`
}

type rlFile struct {
	Domain      string    `yaml:"domain"`
	Descriptors []*rlNode `yaml:"descriptors"`
}

// rlModel is every domain of the configurations, files of one domain
// merged as envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG merges them.
type rlModel map[string][]*rlNode

func newRLModel(cfgs []diffConfig) (rlModel, error) {
	m := rlModel{}
	for _, c := range cfgs {
		for _, f := range c.files {
			var root rlFile
			if err := yaml.Unmarshal([]byte(f.yaml), &root); err != nil {
				return nil, fmt.Errorf("%s: %w", f.name, err)
			}
			m[root.Domain] = append(m[root.Domain], root.Descriptors...)
		}
	}
	return m, nil
}

// rlMatch is what the model knows of a descriptor's limit.
type rlMatch struct {
	shadow bool
	// counter names envoyproxy/ratelimit's counter for the descriptor,
	// without the window: entries, with a share_threshold pattern in
	// place of the value it matched.
	counter string
}

// lookup finds the node whose rate_limit applies to d, as
// envoyproxy/ratelimit looks one up: at each level key_value, else the
// first wildcard prefix that matches, else the key alone; the limit
// applies only at the descriptor's last entry.
func (m rlModel) lookup(domain string, d *extrlsv3.RateLimitDescriptor) (rlMatch, bool) {
	level := m[domain]
	if level == nil {
		return rlMatch{}, false
	}
	entries := d.GetEntries()
	var b strings.Builder
	b.WriteString(domain)
	var shadow, found bool
	for i, e := range entries {
		var next *rlNode
		for _, n := range level {
			if n.Key == e.GetKey() && n.Value != "" && n.Value == e.GetValue() {
				next = n
				break
			}
		}
		if next == nil {
			for _, n := range level {
				if p, ok := strings.CutSuffix(n.Value, "*"); ok && n.Key == e.GetKey() && strings.HasPrefix(e.GetValue(), p) {
					next = n
					break
				}
			}
		}
		if next == nil {
			for _, n := range level {
				if n.Key == e.GetKey() && n.Value == "" {
					next = n
					break
				}
			}
		}
		if next == nil {
			break
		}
		v := e.GetValue()
		if next.Share {
			v = next.Value
		}
		b.WriteString("|" + e.GetKey() + "=" + v)
		if i == len(entries)-1 && next.RateLimit != nil {
			found, shadow = true, next.Shadow
		}
		if len(next.Descriptors) == 0 {
			break
		}
		level = next.Descriptors
	}
	return rlMatch{shadow: shadow, counter: b.String()}, found
}
