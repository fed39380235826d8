package tiers

import (
	"strconv"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate-go/floodgate/internal/syntax"
)

// The YAML forms of the richer policy fields: several windows per limit
// (rate and burst as lists), matches beyond the method, header key scopes
// and enforce_percent. Errors name the field path and line like the rest
// of the loader.

// rateSpec collects a tier's, rule's or override's rate and burst fields,
// which may come in either order, until windows combines them.
type rateSpec struct {
	rate      Rate
	rates     []Rate // a list of rates (several windows); nil: one rate
	burst     int64
	bursts    []int64
	burstList bool
	burstNode *yaml.Node
}

// rateField decodes rate: "N/duration", "tier", or a list of "N/duration".
func (d *decoder) rateField(n *yaml.Node, path string, rs *rateSpec) {
	if n.Kind != yaml.SequenceNode {
		rs.rate = d.rate(n, path)
		return
	}
	if len(n.Content) == 0 {
		d.fail(path, n, "list at least one rate (rate: [100/1m, 1000/1h])")
		return
	}
	rs.rates = make([]Rate, len(n.Content))
	for i, e := range n.Content {
		ep := path + "[" + strconv.Itoa(i) + "]"
		d.at(ep, e)
		if e.Kind == yaml.AliasNode {
			d.fail(ep, e, "YAML aliases are not supported")
			continue
		}
		r := d.rate(e, ep)
		if r.Tier {
			d.fail(ep, e, `"tier" cannot be one window of several (give the tiers several windows instead)`)
			continue
		}
		rs.rates[i] = r
	}
}

// burstField decodes burst: an integer, or a list of integers, one per
// window.
func (d *decoder) burstField(n *yaml.Node, path string, rs *rateSpec) {
	rs.burstNode = n
	if n.Kind != yaml.SequenceNode {
		rs.burst, _ = d.integer(n, path)
		return
	}
	rs.burstList = true
	rs.bursts = make([]int64, len(n.Content))
	for i, e := range n.Content {
		ep := path + "[" + strconv.Itoa(i) + "]"
		d.at(ep, e)
		if e.Kind == yaml.AliasNode {
			d.fail(ep, e, "YAML aliases are not supported")
			continue
		}
		rs.bursts[i], _ = d.integer(e, ep)
	}
}

// windows combines the rate and burst fields of the tier, rule or override
// at owner into its Rate and Burst, or its Windows.
func (d *decoder) windows(owner string, rs *rateSpec) (Rate, int64, []Window) {
	bp := owner + ".burst"
	if rs.rates == nil {
		if rs.burstList {
			d.fail(bp, rs.burstNode, "a list of bursts needs a list of rates, one per window (rate: [100/1m, 1000/1h])")
		}
		return rs.rate, rs.burst, nil
	}
	switch {
	case rs.burstNode != nil && !rs.burstList:
		d.fail(bp, rs.burstNode, "with a list of rates, burst is a list too, one per window (burst: [20, 1000])")
	case rs.burstList && len(rs.bursts) != len(rs.rates):
		d.fail(bp, rs.burstNode, "%d bursts for %d rates: give one per window", len(rs.bursts), len(rs.rates))
	}
	ws := make([]Window, len(rs.rates))
	for i, r := range rs.rates {
		ws[i].Rate = r
		if rs.burstList && i < len(rs.bursts) {
			ws[i].Burst = rs.bursts[i]
		}
	}
	return Rate{}, 0, ws
}

// percent decodes enforce_percent: an integer in [1, 100].
func (d *decoder) percent(n *yaml.Node, path string) int {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		d.fail(path, n, "must be an integer percentage in [1, 100], got %s", kindName(n))
		return 0
	}
	var v int64
	if err := n.Decode(&v); err != nil || v < 0 || v > 100 {
		d.fail(path, n, "%s is out of range [1, 100]", n.Value)
		return 0
	}
	if v == 0 {
		d.fail(path, n, "0 enforces nothing: write shadow: true instead")
		return 0
	}
	return int(v)
}

// match decodes a rule's match: method, header, tier.
func (d *decoder) match(n *yaml.Node, path string, m *Match) {
	d.fields(n, path, func(k string, v *yaml.Node, fp string) bool {
		switch k {
		case "method":
			m.Method, _ = d.str(v, fp)
			if m.Method == "" {
				d.fail(fp, v, "must not be empty (omit method to match every method)")
			}
		case "header":
			d.headerMatch(v, fp, m)
		case "tier":
			m.Tier = d.strings(v, fp)
			if m.Tier == nil {
				m.Tier = []string{} // reported; keeps "match every tier" from being read
			}
		default:
			return false
		}
		return true
	})
	if n.Kind == yaml.MappingNode && len(n.Content) == 0 {
		d.fail(path, n, "must name a method, header or tier (omit match to apply the rule to every request)")
	}
}

// headerMatch decodes match.header: a mapping of header names to a value
// or a list of values.
func (d *decoder) headerMatch(n *yaml.Node, path string, m *Match) {
	if !d.kind(n, path, yaml.MappingNode, "a mapping of header names to values") {
		return
	}
	if len(n.Content) == 0 {
		d.fail(path, n, "name at least one header (omit header to match any)")
		return
	}
	m.Header = make(map[string][]string, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		name, ok := d.str(k, path)
		if !ok {
			continue
		}
		hp := path + "." + name
		if !syntax.Name(name) {
			hp = path + "[" + strconv.Quote(name) + "]"
		}
		if _, dup := m.Header[name]; dup {
			d.fail(hp, k, "repeated header")
			continue
		}
		d.at(hp, v)
		vals := d.strings(v, hp)
		if vals == nil {
			d.rep.bad[hp] = struct{}{}
			vals = []string{}
		}
		m.Header[name] = vals
	}
}

// strings decodes a string or a list of strings; nil after an error.
func (d *decoder) strings(n *yaml.Node, path string) []string {
	switch n.Kind {
	case yaml.AliasNode:
		d.fail(path, n, "YAML aliases are not supported")
		return nil
	case yaml.SequenceNode:
		if len(n.Content) == 0 {
			d.fail(path, n, "list at least one value")
			return nil
		}
		out := make([]string, 0, len(n.Content))
		for i, e := range n.Content {
			ep := path + "[" + strconv.Itoa(i) + "]"
			d.at(ep, e)
			s, ok := d.str(e, ep)
			if !ok {
				return nil
			}
			out = append(out, s)
		}
		return out
	}
	s, ok := d.str(n, path)
	if !ok {
		return nil
	}
	return []string{s}
}
