package tiers

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/syntax"
	"github.com/floodgate-go/floodgate/internal/yamldoc"
	"github.com/floodgate-go/floodgate/quota"
)

// Load decodes and validates a YAML policy of at most 4 MiB. Every
// problem is reported, not only the first: the error is a *PolicyError
// whose FieldErrors carry the field path and line, e.g.
//
//	rules[2].rate: "5/minute" is not N/duration (write 5/1m), at line 14
//
// Unknown fields, repeated fields, YAML aliases and more than one document
// are errors. An empty document is an error too (an accidentally
// truncated file must not lift every limit); a policy with no rules says
// "rules: []" explicitly.
func Load(data []byte) (*Policy, error) {
	root, ye := yamldoc.Parse(data)
	if ye != nil {
		return nil, &PolicyError{Errs: []*FieldError{{Msg: ye.Msg, Line: ye.Line}}}
	}
	p := &Policy{}
	if err := p.UnmarshalYAML(root); err != nil {
		return nil, err
	}
	return p, nil
}

// UnmarshalYAML decodes and validates the policy at n, a YAML mapping, as
// Load does: errors are a *PolicyError whose lines are n's. A policy can
// so be one part of a larger document: package policyfile decodes a
// policy file's shedder: and concurrency: sections and hands the rest of
// its root to UnmarshalYAML. p is set whatever the error.
func (p *Policy) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	d := &decoder{rep: &reporter{lines: map[string]int{}, bad: map[string]struct{}{}}}
	*p = Policy{}
	d.policy(n, p)
	if _, err := compile(p, defaultKeyPrefix, d.rep); err != nil {
		return err
	}
	return nil
}

type decoder struct {
	rep *reporter
}

// fail records a decode error at path and suppresses validation errors
// under it.
func (d *decoder) fail(path string, n *yaml.Node, format string, args ...any) {
	d.rep.bad[path] = struct{}{}
	d.rep.errs = append(d.rep.errs, &FieldError{Path: path, Msg: fmt.Sprintf(format, args...), Line: n.Line})
}

func (d *decoder) at(path string, n *yaml.Node) { d.rep.lines[path] = n.Line }

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "null"
		}
		return strconv.Quote(n.Value)
	}
	return "a document"
}

// fields walks a mapping node, calling set for each known field and
// reporting unknown and repeated ones.
func (d *decoder) fields(n *yaml.Node, path string, set func(key string, v *yaml.Node, p string) bool) bool {
	if !d.kind(n, path, yaml.MappingNode, "a mapping") {
		return false
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.fail(path, k, "keys must be plain strings, got %s", kindName(k))
			continue
		}
		fp := join(path, k.Value)
		if first, dup := seen[k.Value]; dup {
			d.fail(fp, k, "repeated field (first at line %d)", first)
			continue
		}
		seen[k.Value] = k.Line
		if v.Kind == yaml.AliasNode {
			d.fail(fp, v, "YAML aliases are not supported")
			continue
		}
		d.at(fp, v)
		if !set(k.Value, v, fp) {
			d.fail(fp, k, "unknown field")
		}
	}
	return true
}

func (d *decoder) kind(n *yaml.Node, path string, want yaml.Kind, wantName string) bool {
	if n.Kind == want {
		return true
	}
	if n.Kind == yaml.AliasNode {
		d.fail(path, n, "YAML aliases are not supported")
		return false
	}
	d.fail(path, n, "must be %s, got %s", wantName, kindName(n))
	return false
}

func (d *decoder) str(n *yaml.Node, path string) (string, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		d.fail(path, n, "must be a string, got %s", kindName(n))
		return "", false
	}
	return n.Value, true
}

func (d *decoder) integer(n *yaml.Node, path string) (int64, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		d.fail(path, n, "must be an integer, got %s", kindName(n))
		return 0, false
	}
	var v int64
	if err := n.Decode(&v); err != nil {
		d.fail(path, n, "%q is not a 64-bit integer", n.Value)
		return 0, false
	}
	if v < 1 {
		d.fail(path, n, "%d must be at least 1", v)
		return 0, false
	}
	return v, true
}

func (d *decoder) boolean(n *yaml.Node, path string) bool {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
		d.fail(path, n, "must be true or false, got %s", kindName(n))
		return false
	}
	var v bool
	if err := n.Decode(&v); err != nil {
		d.fail(path, n, "must be true or false, got %s", kindName(n))
		return false
	}
	return v
}

func (d *decoder) rate(n *yaml.Node, path string) Rate {
	s, ok := d.str(n, path)
	if !ok {
		return Rate{}
	}
	r, err := parseRate(s)
	if err != nil {
		d.fail(path, n, "%s", err.Error())
		return Rate{}
	}
	return r
}

func (d *decoder) algorithm(n *yaml.Node, path string) quota.Algorithm {
	s, ok := d.str(n, path)
	if !ok {
		return 0
	}
	var a quota.Algorithm
	err := a.UnmarshalText([]byte(s))
	if err != nil {
		d.fail(path, n, "%s", err.Error())
	}
	return a
}

func (d *decoder) policy(n *yaml.Node, p *Policy) {
	if n.Kind != yaml.MappingNode {
		d.fail("", n, "a policy must be a mapping (tiers, default_tier, rules, overrides, methods, exempt, deny, shadow), got %s", kindName(n))
		return
	}
	haveRules := false
	ok := d.fields(n, "", func(key string, v *yaml.Node, fp string) bool {
		if stage, ok := stageSections[key]; ok {
			d.fail(fp, keyNode(n, key), "the %s's settings are read by package policyfile, which applies them to the %s: load the file with policyfile.Load or policyfile.Watch", stage, stage)
			return true
		}
		switch key {
		case "tiers":
			d.tiers(v, fp, p)
		case "default_tier":
			p.DefaultTier, _ = d.str(v, fp)
		case "rules":
			haveRules = true
			if d.kind(v, fp, yaml.SequenceNode, "a list") {
				p.Rules = make([]Rule, len(v.Content))
				for i, rn := range v.Content {
					d.rule(rn, fp+"["+strconv.Itoa(i)+"]", &p.Rules[i])
				}
			}
		case "overrides":
			if d.kind(v, fp, yaml.SequenceNode, "a list") {
				p.Overrides = make([]Override, len(v.Content))
				for i, on := range v.Content {
					d.override(on, fp+"["+strconv.Itoa(i)+"]", &p.Overrides[i])
				}
			}
		case "methods":
			d.methods(v, fp, p)
		case "exempt":
			p.Exempt = d.nets(v, fp)
		case "deny":
			p.Deny = d.nets(v, fp)
		case "shadow":
			p.Shadow = d.boolean(v, fp)
		case "rls":
			d.rls(v, fp, p)
		default:
			return false
		}
		return true
	})
	if ok && !haveRules {
		d.fail("rules", n, "required (write \"rules: []\" for a policy without rules)")
	}
}

// stageSections are the top-level sections of a policy file that
// configure stages, not rate limits, by the stage each configures. Load
// refuses them, so that a file loaded through package tiers alone never
// drops them unseen; package policyfile decodes them.
var stageSections = map[string]string{"shedder": "load shedder", "concurrency": "concurrency limiter", "identity": "transport", "outbound": "outbound limits"}

// keyNode returns the key node of key in the mapping n.
func keyNode(n *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i]
		}
	}
	return n
}

func (d *decoder) tiers(n *yaml.Node, path string, p *Policy) {
	if !d.kind(n, path, yaml.MappingNode, "a mapping") {
		return
	}
	p.Tiers = make(map[string]Tier, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		name, ok := d.str(k, path)
		if !ok {
			continue
		}
		tp := path + "." + name
		if !syntax.Name(name) {
			tp = path + "[" + strconv.Quote(name) + "]"
		}
		if _, dup := p.Tiers[name]; dup {
			d.fail(tp, k, "repeated tier")
			continue
		}
		d.at(tp, v)
		var t Tier
		var rs rateSpec
		d.fields(v, tp, func(key string, fv *yaml.Node, fp string) bool {
			switch key {
			case "rate":
				d.rateField(fv, fp, &rs)
			case "burst":
				d.burstField(fv, fp, &rs)
			case "algorithm":
				t.Algorithm = d.algorithm(fv, fp)
			default:
				return false
			}
			return true
		})
		t.Rate, t.Burst, t.Windows = d.windows(tp, &rs)
		p.Tiers[name] = t
	}
}

func (d *decoder) rule(n *yaml.Node, path string, r *Rule) {
	d.at(path, n)
	r.line = n.Line
	var algNode *yaml.Node
	var rs rateSpec
	defer func() { r.Rate, r.Burst, r.Windows = d.windows(path, &rs) }()
	d.fields(n, path, func(key string, v *yaml.Node, fp string) bool {
		if key == "algorithm" {
			algNode = v
		}
		switch key {
		case "name":
			r.Name, _ = d.str(v, fp)
		case "match":
			d.match(v, fp, &r.Match)
		case "key":
			if !d.kind(v, fp, yaml.SequenceNode, "a list") {
				return true
			}
			r.Key = make([]Scope, 0, len(v.Content))
			for j, sn := range v.Content {
				sp := fp + "[" + strconv.Itoa(j) + "]"
				d.at(sp, sn)
				s, ok := d.str(sn, sp)
				if !ok {
					r.Key = append(r.Key, 0)
					continue
				}
				if h, isHeader := strings.CutPrefix(s, "header:"); isHeader {
					r.Key = append(r.Key, ScopeHeader)
					r.KeyHeaders = append(r.KeyHeaders, h) // checked with the rule
					continue
				}
				if s == "header" {
					d.fail(sp, sn, "name the header: header:<name> (header:x-region)")
					r.Key = append(r.Key, 0)
					continue
				}
				sc, err := parseScope(s)
				if err != nil {
					d.fail(sp, sn, "%s", err.Error())
				}
				r.Key = append(r.Key, sc) // 0 when unknown: keeps later indices right
			}
		case "rate":
			d.rateField(v, fp, &rs)
		case "burst":
			d.burstField(v, fp, &rs)
		case "algorithm":
			r.Algorithm = d.algorithm(v, fp)
		case "cost":
			r.Cost, _ = d.integer(v, fp)
		case "enforce_percent":
			r.EnforcePercent = d.percent(v, fp)
		case "hide_quota":
			r.HideQuota = d.boolean(v, fp)
		case "shadow":
			r.Shadow = d.boolean(v, fp)
		case "soft":
			r.Soft = d.boolean(v, fp)
		case "cache_denials":
			r.CacheDenials = d.boolean(v, fp)
		case "consistency":
			if s, ok := d.str(v, fp); ok {
				var c quota.Consistency
				err := c.UnmarshalText([]byte(s))
				if err != nil {
					d.fail(fp, v, "%s", err.Error())
				}
				r.Consistency = c
			}
		case "sync_interval":
			if s, ok := d.str(v, fp); ok {
				iv, err := time.ParseDuration(s)
				if err != nil || iv <= 0 {
					d.fail(fp, v, "%q is not a positive duration such as 50ms", s)
				} else {
					r.SyncInterval = iv
				}
			}
		case "on_store_error":
			if s, ok := d.str(v, fp); ok {
				var m quota.FailMode
				err := m.UnmarshalText([]byte(s))
				if err != nil {
					d.fail(fp, v, "%s", err.Error())
				}
				r.OnStoreError = m
			}
		case "when_missing":
			r.WhenMissing, _ = d.str(v, fp) // checked with the rule
		case "ipv4_prefix":
			n, _ := d.integer(v, fp)
			r.IPv4Prefix = int(min(n, 1<<16)) // the range is checked with the rule
		case "ipv6_prefix":
			n, _ := d.integer(v, fp)
			r.IPv6Prefix = int(min(n, 1<<16))
		case "settle", "max_wait", "max_waiters", "meter":
			d.shaping(key, v, fp, r)
		case "time_zone", "week_starts":
			d.calendarField(key, v, fp, r)
		default:
			return false
		}
		return true
	})
	if algNode == nil && rs.rate.Calendar != NoCalendar {
		r.Algorithm = quota.FixedWindow // a calendar rate counts in fixed windows
	}
	if algNode != nil && rs.rate.Tier && r.Algorithm == quota.TokenBucket {
		// Go's zero value cannot tell an explicit token_bucket from none:
		// catch it here so a tier's algorithm is never silently contradicted.
		d.fail(path+".algorithm", algNode, `must not be set when rate is "tier" (the tier sets it)`)
	}
}

func (d *decoder) override(n *yaml.Node, path string, o *Override) {
	d.at(path, n)
	var rs rateSpec
	defer func() { o.Rate, o.Burst, o.Windows = d.windows(path, &rs) }()
	d.fields(n, path, func(key string, v *yaml.Node, fp string) bool {
		switch key {
		case "rule":
			o.Rule, _ = d.str(v, fp)
		case "key":
			o.Key = map[Scope]string{}
			d.fields(v, fp, func(sk string, sv *yaml.Node, sp string) bool {
				if h, isHeader := strings.CutPrefix(sk, "header:"); isHeader {
					if val, ok := d.str(sv, sp); ok {
						if o.KeyHeaders == nil {
							o.KeyHeaders = map[string]string{}
						}
						o.KeyHeaders[h] = val
					}
					return true
				}
				sc, err := parseScope(sk)
				if err == nil && sc == ScopeHeader {
					err = errors.New("name the header: header:<name> (header:x-region)")
				}
				if err != nil {
					d.fail(sp, sv, "%s", err.Error())
					return true
				}
				if val, ok := d.str(sv, sp); ok {
					o.Key[sc] = val
				}
				return true
			})
		case "rate":
			d.rateField(v, fp, &rs)
		case "burst":
			d.burstField(v, fp, &rs)
		case "algorithm":
			a := d.algorithm(v, fp)
			o.Algorithm = &a
		default:
			return false
		}
		return true
	})
}

// nets decodes an address list: a list of CIDRs or single addresses.
// An entry that fails keeps its place (as the zero Prefix, whose error is
// already reported), so later indices stay right.
func (d *decoder) nets(n *yaml.Node, path string) []netip.Prefix {
	if !d.kind(n, path, yaml.SequenceNode, "a list of CIDRs or addresses") {
		return nil
	}
	out := make([]netip.Prefix, 0, len(n.Content))
	for i, en := range n.Content {
		ep := path + "[" + strconv.Itoa(i) + "]"
		d.at(ep, en)
		s, ok := d.str(en, ep)
		if !ok {
			out = append(out, netip.Prefix{})
			continue
		}
		p, err := syntax.ParseNet(s)
		if err != nil {
			d.fail(ep, en, "%s", err.Error())
		}
		out = append(out, p)
	}
	return out
}

func (d *decoder) methods(n *yaml.Node, path string, p *Policy) {
	if !d.kind(n, path, yaml.MappingNode, "a mapping") {
		return
	}
	p.Methods = make(map[string]floodgate.MethodOptions, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		m, ok := d.str(k, path)
		if !ok {
			continue
		}
		mp := path + "[" + strconv.Quote(m) + "]"
		if _, dup := p.Methods[m]; dup {
			d.fail(mp, k, "repeated method")
			continue
		}
		d.at(mp, v)
		var mo floodgate.MethodOptions
		d.fields(v, mp, func(key string, fv *yaml.Node, fp string) bool {
			switch key {
			case "cost":
				mo.Cost, _ = d.integer(fv, fp)
			case "priority":
				if s, ok := d.str(fv, fp); ok {
					pr, err := floodgate.ParsePriority(s)
					if err != nil {
						d.fail(fp, fv, "unknown priority %q (want critical, write, read or test)", s)
					}
					mo.Priority = pr
				}
			default:
				return false
			}
			return true
		})
		p.Methods[m] = mo
	}
}
