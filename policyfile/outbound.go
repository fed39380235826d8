package policyfile

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate-go/floodgate/tiers"
)

// outboundPolicyKeys are the keys of an outbound: section that package
// tiers decodes, as it decodes them at the top of the file: the rules the
// service's outgoing calls are charged to.
var outboundPolicyKeys = []string{"tiers", "default_tier", "rules", "overrides", "shadow"}

// maxCooldown is the longest outbound.cooldown.max (and default).
const maxCooldown = time.Hour

// outbound decodes the outbound: section at n: its cooldown: here, the
// rest through package tiers, whose errors get the section's path.
func (d *decoder) outbound(n *yaml.Node, f *File) []*tiers.FieldError {
	f.Outbound = &tiers.Policy{}
	if !d.kind(n, "outbound", yaml.MappingNode, "a mapping") {
		return nil
	}
	rest := *n
	rest.Content = nil
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		fp := join("outbound", k.Value)
		switch {
		case k.Kind != yaml.ScalarNode:
			d.rep.fail("outbound", k, "keys must be plain strings, got %s", kindName(k))
		case seen[k.Value] != 0:
			d.rep.fail(fp, k, "repeated field (first at line %d)", seen[k.Value])
		case k.Value == "cooldown":
			seen[k.Value] = k.Line
			d.rep.lines[fp] = v.Line
			d.cooldown(v, fp, f)
		case slices.Contains(outboundPolicyKeys, k.Value):
			seen[k.Value] = k.Line
			rest.Content = append(rest.Content, k, v)
		default:
			d.rep.fail(fp, k, "unknown field (an outbound section holds %s and cooldown)", strings.Join(outboundPolicyKeys, ", "))
		}
	}
	if seen["rules"] == 0 { // a section of cooldown alone has no rules
		rest.Content = append(rest.Content,
			&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "rules", Line: n.Line},
			&yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Line: n.Line})
	}
	if err := f.Outbound.UnmarshalYAML(&rest); err != nil {
		pe, ok := err.(*tiers.PolicyError)
		if !ok {
			return []*tiers.FieldError{{Path: "outbound", Msg: err.Error(), Line: n.Line}}
		}
		errs := make([]*tiers.FieldError, len(pe.Errs))
		for i, fe := range pe.Errs {
			c := *fe
			c.Path = join("outbound", fe.Path)
			if c.Line == 0 {
				c.Line = n.Line
			}
			errs[i] = &c
		}
		return errs
	}
	return nil
}

// cooldown decodes outbound: cooldown:.
func (d *decoder) cooldown(n *yaml.Node, path string, f *File) {
	d.fields(n, path, func(key string, v *yaml.Node, fp string) {
		dur := d.duration(v, fp)
		switch key {
		case "default":
			f.CooldownDefault = dur
		case "max":
			f.CooldownMax = dur
		case "sync":
			f.CooldownSync = dur
		}
	})
}

// validateOutbound reports what is wrong with the cooldown settings of f.
func validateOutbound(rep *reporter, f *File) {
	if f.Outbound == nil {
		if f.CooldownDefault != 0 || f.CooldownMax != 0 || f.CooldownSync != 0 {
			rep.add("outbound.cooldown", "is set without an outbound section (File.Outbound is nil)")
		}
		return
	}
	for _, c := range []struct {
		key string
		v   time.Duration
	}{{"default", f.CooldownDefault}, {"max", f.CooldownMax}, {"sync", f.CooldownSync}} {
		switch {
		case c.v < 0:
			rep.add("outbound.cooldown."+c.key, fmt.Sprintf("%v must be positive", c.v))
		case c.v > maxCooldown:
			rep.add("outbound.cooldown."+c.key, fmt.Sprintf("%v is longer than %v", c.v, maxCooldown))
		}
	}
	if f.CooldownDefault > 0 && f.CooldownMax > 0 && f.CooldownDefault > f.CooldownMax {
		rep.add("outbound.cooldown.default", fmt.Sprintf("%v is longer than max %v", f.CooldownDefault, f.CooldownMax))
	}
	if f.CooldownSync > 10*time.Second {
		rep.add("outbound.cooldown.sync", fmt.Sprintf("%v is longer than 10s: replicas would learn of a cooldown too late", f.CooldownSync))
	}
}

// OutboundLimits returns the policy of the outbound: section, or a policy
// without rules when the file has none: what a *tiers.Limiter of outgoing
// calls is set to (Targets.Outbound).
func (f *File) OutboundLimits() *tiers.Policy {
	if f == nil || f.Outbound == nil {
		return &tiers.Policy{}
	}
	return f.Outbound
}
