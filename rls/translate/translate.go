// Package translate turns envoyproxy/ratelimit configuration files into
// a floodgate policy: the rules and the rls: section that make serve-rls
// (package rls) answer Envoy as envoyproxy/ratelimit would, but all or
// nothing, on floodgate's stores.
//
// # What it decides
//
// Each configuration file names a domain and a tree of descriptors. Every
// node with a rate_limit becomes one descriptor of the domain in the rls:
// section, with the entries on the path from the root, and, unless it is
// unlimited, one rule:
//
//   - the rule's name is the node's path, as envoyproxy/ratelimit names
//     its statistics: domain, then key or key_value per level, joined by
//     dots ("edge.generic_key_api.tenant"), every byte outside
//     [A-Za-z0-9_.-] replaced by '_'; two nodes whose names collide that
//     way are an error naming both lines;
//   - its rate is requests_per_unit per unit (second 1s, minute 1m, hour
//     1h, day 24h, week 168h, month 720h, year 8760h: envoyproxy/ratelimit's
//     dividers) and its algorithm fixed_window: envoyproxy/ratelimit counts
//     in fixed windows aligned on the Unix epoch, and so does floodgate;
//   - a level with a value is matched as that value; a level without one
//     matches any value and keys the rule on it, so that each value has a
//     bucket of its own as each has a counter in envoyproxy/ratelimit. A
//     wildcard value ("/api/*": every value with that prefix, a fixed
//     value preferred to it, as there) keys the rule on the value too,
//     unless share_threshold: then every value it matches shares one
//     bucket, as they share one counter there. A '*' before the end of a
//     value is an error (envoyproxy/ratelimit's versions read it
//     differently);
//     Its scope is the descriptor key's entry in Options.As, else ip for
//     remote_address, else header:<key> (masked_remote_address too: Envoy
//     sends a network, which envoyproxy/ratelimit counts per value; a key
//     that cannot be a header scope, such as x-forwarded-for, is an error
//     naming the line: map it with Options.As). Map a key to the identity
//     the services key on (-as tenant-id=tenant) and the edge and the
//     services share one bucket;
//   - an ip scope keys an IPv6 client by its /64, floodgate's default
//     (envoyproxy/ratelimit counts each address; a rule with ipv6_prefix:
//     128 does too): the one deliberate difference, stated in the output;
//   - shadow_mode is the rule's shadow; rate_limit's name and replaces
//     are the descriptor's name and replaces; unlimited: true is an
//     unlimited descriptor; a value with no rate_limit and nothing below
//     it is a no_limit descriptor (matched, and limited nowhere);
//     requests_per_unit 0 is a deny descriptor (always over its limit of
//     0 per unit, shadow_mode included), with no rule;
//   - with Options.MergeDomains, a domain given in several files is one
//     domain (MERGE_DOMAIN_CONFIG); without, it is an error;
//   - with Options.Consistency leased or async, every rule has that
//     consistency and the algorithm token_bucket instead (the local-first
//     modes need one): N per unit becomes a bucket of N refilling N per
//     unit, stated in the output.
//
// What it cannot honour is an error naming the file, line and field, never
// a silent default: quota_mode, share_threshold without a wildcard, a
// '*' inside a value, an unknown unit or field, a domain given twice
// without MergeDomains. detailed_metric and value_to_metric only shape
// envoyproxy/ratelimit's statistics: they are accepted, and the output
// carries a warning (WarningPrefix) saying what floodgate reports instead
// (decisions per rule, never a value in a metric), unless
// Options.IgnoreMetricOptions.
// The output is loaded with tiers.Load before it is returned, so it is a
// valid policy.
package translate

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/tiers"
)

// WarningPrefix starts each line of a translation that warns of what it
// accepted but does differently (a YAML comment): the command prints
// these lines to its standard error too.
const WarningPrefix = "# warning: "

// File is one envoyproxy/ratelimit configuration file.
type File struct {
	// Name names the file in errors.
	Name string
	// Data is its YAML.
	Data []byte
}

// Options tune a translation.
type Options struct {
	// As maps a descriptor key to the scope its values fill: ip, user,
	// tenant, api_key, endpoint or header:<name>. Keys it does not name
	// fill ip (remote_address) or header:<key>.
	As map[string]string
	// IgnoreMetricOptions drops detailed_metric and value_to_metric
	// silently; without it the output carries a warning (a "# warning:"
	// comment) saying what floodgate reports instead.
	IgnoreMetricOptions bool
	// MergeDomains merges the descriptors of a domain given in several
	// files into one domain (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG);
	// without it a domain given twice is an error. Two files listing the
	// same key and value at the top of one domain are an error either way.
	MergeDomains bool
	// Consistency is where every rule's decisions are made: "" or "exact"
	// (fixed windows decided in the store on every call, as
	// envoyproxy/ratelimit decides them), "leased" or "async" (decided
	// locally against the store's budget, package tiers/localfirst, which
	// needs a token bucket: requests_per_unit per unit becomes a bucket of
	// requests_per_unit refilling at that rate, stated in the output).
	Consistency string
}

// Error is one thing a translation cannot do: where, and why.
type Error struct {
	File string
	Line int
	// Path is the field, as in the input: "descriptors[1].rate_limit.unit".
	Path string
	Msg  string
}

// Error returns "file:line: path: msg".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":" + strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Path != "" {
		b.WriteString(e.Path + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// units are envoyproxy/ratelimit's units and their periods as floodgate
// writes them.
var units = map[string]string{
	"second": "1s", "minute": "1m", "hour": "1h", "day": "24h",
	"week": "168h", "month": "720h", "year": "8760h",
}

// Translate returns the floodgate policy, as YAML, equivalent to the
// files. Every problem is reported, as *Error values joined.
func Translate(files []File, opts Options) ([]byte, error) {
	t := &translator{opts: opts, names: map[string]origin{}, domains: map[string]origin{}, scopeOK: map[string]error{}}
	for s, scope := range opts.As {
		if err := checkScope(scope); err != nil {
			t.errs = append(t.errs, &Error{File: "-as", Msg: fmt.Sprintf("%s=%s: %v", s, scope, err)})
		}
	}
	if opts.Consistency != "" {
		var c quota.Consistency
		switch err := c.UnmarshalText([]byte(opts.Consistency)); {
		case err != nil:
			t.errs = append(t.errs, &Error{File: "-consistency", Msg: fmt.Sprintf("%q is not exact, leased or async", opts.Consistency)})
		case c == quota.Exact:
			t.opts.Consistency = ""
		default:
			t.opts.Consistency = c.String()
		}
	}
	for _, f := range files {
		t.file(f)
	}
	if len(t.errs) > 0 {
		return nil, errors.Join(t.errs...)
	}
	out, err := t.render(files)
	if err != nil {
		return nil, err
	}
	if _, err := tiers.Load(out); err != nil {
		return nil, fmt.Errorf("translate: the translation is not a valid policy (a bug: please report it with the input):\n%w", err)
	}
	return out, nil
}

// checkScope checks a scope of Options.As.
func checkScope(s string) error {
	switch s {
	case "ip", "user", "tenant", "api_key", "endpoint":
		return nil
	}
	if strings.HasPrefix(s, "header:") {
		return nil // the name is checked where it is used, with a line
	}
	return errors.New("want ip, user, tenant, api_key, endpoint or header:<name>")
}

type origin struct {
	file string
	line int
	path string
}

type translator struct {
	opts Options
	errs []error
	// top holds, per domain, the top-level descriptors seen (by key and
	// value: where), so that merged files cannot list one twice.
	top map[string]map[level]origin
	// warnings are the output's "# warning:" lines.
	warnings []string
	rules    []outRule
	domains  map[string]origin
	order    []string // domains in input order
	mapping  map[string][]outDescriptor
	names    map[string]origin
	scopeOK  map[string]error
	// usesIP: a rule is keyed on ip (the output says how IPv6 is keyed).
	usesIP bool
	// metricsDropped lists the metric options dropped, for the output's
	// header comment.
	metricsDropped []string
}

type outRule struct {
	Name      string   `yaml:"name"`
	Key       []string `yaml:"key,omitempty,flow"`
	Rate      string   `yaml:"rate"`
	Algorithm string   `yaml:"algorithm"`
	Shadow    bool     `yaml:"shadow,omitempty"`
	// Consistency is omitted for exact, the default.
	Consistency string `yaml:"consistency,omitempty"`
}

type outEntry struct {
	Key   string `yaml:"key"`
	Value string `yaml:"value,omitempty"`
	As    string `yaml:"as,omitempty"`
}

type outDescriptor struct {
	Entries   []outEntry `yaml:"entries,flow"`
	Rule      string     `yaml:"rule,omitempty"`
	Unlimited bool       `yaml:"unlimited,omitempty"`
	NoLimit   bool       `yaml:"no_limit,omitempty"`
	Deny      *outDeny   `yaml:"deny,omitempty,flow"`
	Name      string     `yaml:"name,omitempty"`
	Replaces  []string   `yaml:"replaces,omitempty,flow"`
}

type outDeny struct {
	Window string `yaml:"window"`
	Shadow bool   `yaml:"shadow,omitempty"`
}

type outDomain struct {
	Domain      string          `yaml:"domain"`
	Descriptors []outDescriptor `yaml:"descriptors"`
}

type outPolicy struct {
	Rules []outRule   `yaml:"rules"`
	RLS   []outDomain `yaml:"rls,omitempty"`
}

func (t *translator) fail(f string, n *yaml.Node, path, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	t.errs = append(t.errs, &Error{File: f, Line: line, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// file translates one configuration file.
func (t *translator) file(f File) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(f.Data))
	if err := dec.Decode(&doc); err != nil {
		t.errs = append(t.errs, &Error{File: f.Name, Msg: "invalid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")})
		return
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind != yaml.MappingNode {
		t.fail(f.Name, root, "", "a configuration is a mapping (domain, descriptors)")
		return
	}
	var domain string
	var domainNode, descs *yaml.Node
	t.fields(f.Name, root, "", func(key string, k, v *yaml.Node, p string) bool {
		switch key {
		case "domain":
			domain, _ = t.str(f.Name, v, p)
			domainNode = k
		case "descriptors":
			descs = v
		default:
			return false
		}
		return true
	})
	if domain == "" {
		if domainNode == nil {
			t.fail(f.Name, root, "domain", "required")
		} else {
			t.fail(f.Name, domainNode, "domain", "must not be empty")
		}
		return
	}
	if prev, dup := t.domains[domain]; dup && !t.opts.MergeDomains {
		t.fail(f.Name, domainNode, "domain", "%q is already the domain of %s:%d (merge them with -merge-domains, as envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG does)", domain, prev.file, prev.line)
		return
	} else if !dup {
		t.domains[domain] = origin{file: f.Name, line: domainNode.Line}
		t.order = append(t.order, domain)
	}
	if t.mapping == nil {
		t.mapping = map[string][]outDescriptor{}
	}
	if descs == nil {
		return
	}
	t.descriptors(f.Name, domain, descs, "descriptors", domain, nil, nil)
}

// descriptors translates a list of descriptors under the given path
// (stat name so far, and the levels above).
func (t *translator) descriptors(file, domain string, n *yaml.Node, path, stat string, levels []level, keyNodes []*yaml.Node) {
	if n.Kind != yaml.SequenceNode {
		t.fail(file, n, path, "must be a list")
		return
	}
	seen := map[level]origin{} // the descriptors of this list, by key and value
	if len(levels) == 0 {      // the top of a domain, which merged files share
		if t.top == nil {
			t.top = map[string]map[level]origin{}
		}
		if t.top[domain] == nil {
			t.top[domain] = seen
		}
		seen = t.top[domain]
	}
	for i, dn := range n.Content {
		dp := path + "[" + strconv.Itoa(i) + "]"
		if dn.Kind != yaml.MappingNode {
			t.fail(file, dn, dp, "a descriptor is a mapping (key, value, rate_limit, descriptors, ...)")
			continue
		}
		var (
			key, value       string
			keyNode          *yaml.Node
			rl, sub          *yaml.Node
			shadow, hasValue bool
			share            bool
			shareNode        *yaml.Node
		)
		t.fields(file, dn, dp, func(k string, kn, v *yaml.Node, p string) bool {
			switch k {
			case "key":
				key, _ = t.str(file, v, p)
				keyNode = v
			case "value":
				value, hasValue = t.str(file, v, p)
				if i := strings.IndexByte(value, '*'); hasValue && i >= 0 && i != len(value)-1 {
					t.fail(file, v, p, "%q has a '*' before its end: floodgate's wildcards are prefixes (foo*), and envoyproxy/ratelimit reads a '*' inside a value differently from one version to the next", value)
				}
			case "rate_limit":
				rl = v
			case "descriptors":
				sub = v
			case "shadow_mode":
				shadow = t.boolean(file, v, p)
			case "quota_mode":
				if t.boolean(file, v, p) {
					t.fail(file, kn, p, "quota mode is not supported: floodgate has no quota-mode responses")
				}
			case "share_threshold":
				share, shareNode = t.boolean(file, v, p), kn
			case "detailed_metric", "value_to_metric":
				if t.boolean(file, v, p) {
					t.metricsDropped = append(t.metricsDropped, fmt.Sprintf("%s:%d %s", file, kn.Line, p))
					if !t.opts.IgnoreMetricOptions {
						t.warnings = append(t.warnings, fmt.Sprintf("%s:%d: %s: %s only names envoyproxy/ratelimit's statistics after descriptor values; floodgate counts decisions per rule (floodgate.decisions by floodgate.policy, the rule named after the descriptor's path) and never puts a value in a metric", file, kn.Line, p, k))
					}
				}
			default:
				return false
			}
			return true
		})
		if keyNode == nil {
			t.fail(file, dn, dp+".key", "required")
			continue
		}
		if key == "" {
			t.fail(file, keyNode, dp+".key", "must not be empty")
			continue
		}
		lv := level{key: key, path: dp + ".key"}
		name := stat + "." + key
		if hasValue && value != "" {
			lv.value = value
			name += "_" + value
		}
		if share {
			if !strings.HasSuffix(lv.value, "*") {
				t.fail(file, shareNode, dp+".share_threshold", "only a wildcard value (foo*) can share its limit, as in envoyproxy/ratelimit")
				continue
			}
			lv.share = true
		}
		if first, dup := seen[level{key: lv.key, value: lv.value}]; dup {
			where := "line " + strconv.Itoa(first.line)
			if first.file != file {
				where = first.file + ":" + strconv.Itoa(first.line)
			}
			t.fail(file, keyNode, dp, "the same key and value as the descriptor at %s", where)
			continue
		}
		seen[level{key: lv.key, value: lv.value}] = origin{file: file, line: keyNode.Line}
		lvs := append(append([]level(nil), levels...), lv)
		kns := append(append([]*yaml.Node(nil), keyNodes...), keyNode)
		switch {
		case rl != nil:
			t.rateLimit(file, domain, rl, dp+".rate_limit", sanitize(name), lvs, kns, shadow)
		case shadow:
			t.fail(file, dn, dp+".shadow_mode", "set on a descriptor without rate_limit: it would shadow nothing")
		case sub == nil && lv.value != "":
			// A value with no limit and nothing below: envoyproxy/ratelimit
			// matches it and stops there, so that value is not limited,
			// whatever its key's any-value sibling says, and is answered as
			// a descriptor with no limit (limit_remaining 0, not unlimited's
			// 4294967295).
			od := outDescriptor{NoLimit: true}
			for _, l := range lvs {
				od.Entries = append(od.Entries, outEntry{Key: l.key, Value: l.value})
			}
			t.mapping[domain] = append(t.mapping[domain], od)
		}
		if sub != nil {
			t.descriptors(file, domain, sub, dp+".descriptors", name, lvs, kns)
		}
	}
}

// rateLimit translates the rate_limit of the descriptor at path (levels).
func (t *translator) rateLimit(file, domain string, n *yaml.Node, path, name string, levels []level, keyNodes []*yaml.Node, shadow bool) {
	if n.Kind != yaml.MappingNode {
		t.fail(file, n, path, "must be a mapping (unit, requests_per_unit, unlimited, name, replaces)")
		return
	}
	var (
		unit, limName string
		unitNode      *yaml.Node
		rpu           int64
		rpuNode       *yaml.Node
		unlimited     bool
		replaces      []string
	)
	t.fields(file, n, path, func(k string, kn, v *yaml.Node, p string) bool {
		switch k {
		case "unit":
			unit, _ = t.str(file, v, p)
			unitNode = v
		case "requests_per_unit":
			rpuNode = v
			if v.Kind != yaml.ScalarNode || v.Tag != "!!int" || v.Decode(&rpu) != nil || rpu < 0 || rpu > 1<<32-1 {
				t.fail(file, v, p, "must be an integer in [0, 4294967295]")
				rpuNode = nil
			}
		case "unlimited":
			unlimited = t.boolean(file, v, p)
		case "name":
			limName, _ = t.str(file, v, p)
		case "replaces":
			replaces = t.replaces(file, v, p, limName)
		default:
			return false
		}
		return true
	})
	od := outDescriptor{Name: limName, Replaces: replaces}
	entries, ok := t.entries(file, levels, keyNodes, unlimited || rpuNode != nil && rpu == 0)
	if !ok {
		return
	}
	od.Entries = entries
	if unlimited {
		if unitNode != nil || rpuNode != nil {
			t.fail(file, n, path, "unlimited takes no unit or requests_per_unit")
			return
		}
		if shadow {
			t.fail(file, n, path, "an unlimited limit in shadow mode shadows nothing")
			return
		}
		od.Unlimited = true
		t.mapping[domain] = append(t.mapping[domain], od)
		return
	}
	period, ok := units[strings.ToLower(unit)]
	switch {
	case unitNode == nil:
		t.fail(file, n, path+".unit", "required")
		return
	case !ok:
		t.fail(file, unitNode, path+".unit", "%q is not a unit (second, minute, hour, day, week, month or year)", unit)
		return
	case rpuNode == nil:
		t.fail(file, n, path+".requests_per_unit", "required")
		return
	case rpu == 0: // always over the limit: a deny descriptor, no rule
		if od.Name == "" {
			od.Name = name
		}
		od.Deny = &outDeny{Window: period, Shadow: shadow}
		t.mapping[domain] = append(t.mapping[domain], od)
		return
	case rpu > quota.MaxRate:
		t.fail(file, rpuNode, path+".requests_per_unit", "%d is above floodgate's largest rate, %d", rpu, quota.MaxRate)
		return
	}
	if prev, dup := t.names[name]; dup {
		t.fail(file, n, path, "its rule name %q is already the name of %s:%d (%s): names keep only [A-Za-z0-9_.-], so two descriptors that differ in other bytes collide", name, prev.file, prev.line, prev.path)
		return
	}
	t.names[name] = origin{file: file, line: n.Line, path: path}
	r := outRule{Name: name, Rate: strconv.FormatInt(rpu, 10) + "/" + period, Algorithm: "fixed_window", Shadow: shadow}
	if t.opts.Consistency != "" {
		r.Algorithm, r.Consistency = "token_bucket", t.opts.Consistency
	}
	for _, e := range od.Entries {
		if e.As != "" {
			r.Key = append(r.Key, e.As)
		}
	}
	t.rules = append(t.rules, r)
	od.Rule = name
	t.mapping[domain] = append(t.mapping[domain], od)
}

// replaces reads a limit's replaces: list (each {name: ...}); limName is
// the limit's own name as read so far, which it may not replace.
func (t *translator) replaces(file string, v *yaml.Node, p, limName string) []string {
	if v.Kind != yaml.SequenceNode {
		t.fail(file, v, p, "must be a list of {name: ...}")
		return nil
	}
	var replaces []string
	for i, rn := range v.Content {
		rp := p + "[" + strconv.Itoa(i) + "]"
		if rn.Kind != yaml.MappingNode {
			t.fail(file, rn, rp, "must be {name: ...}")
			continue
		}
		var rname string
		t.fields(file, rn, rp, func(rk string, _, rv *yaml.Node, rpp string) bool {
			if rk != "name" {
				return false
			}
			rname, _ = t.str(file, rv, rpp)
			return true
		})
		if rname == "" {
			t.fail(file, rn, rp+".name", "required")
			continue
		}
		if rname == limName && limName != "" {
			t.fail(file, rn, rp+".name", "a limit cannot replace itself")
			continue
		}
		replaces = append(replaces, rname)
	}
	return replaces
}

// entries maps a descriptor's levels to the mapping's entries: a level
// with no value, or a wildcard value without share_threshold (each
// counted per value), fills the scope its key maps to, unless the limit
// charges nothing (unlimited, or requests_per_unit 0). ok is false when a
// key maps to no scope or two keys fill one scope (both reported).
func (t *translator) entries(file string, levels []level, keyNodes []*yaml.Node, free bool) ([]outEntry, bool) {
	var out []outEntry
	filled := map[string]string{}
	for i, lv := range levels {
		e := outEntry{Key: lv.key, Value: lv.value}
		perValue := lv.value == "" || strings.HasSuffix(lv.value, "*") && !lv.share
		if perValue && !free {
			scope, err := t.scopeOf(lv.key)
			if err != nil {
				t.fail(file, keyNodes[i], lv.path, "%q %v", lv.key, err)
				return nil, false
			}
			if other, dup := filled[scope]; dup {
				t.fail(file, keyNodes[i], lv.path, "descriptor keys %q and %q both fill %s: map one of them elsewhere with -as", other, lv.key, scope)
				return nil, false
			}
			filled[scope] = lv.key
			e.As = scope
			t.usesIP = t.usesIP || scope == "ip"
		}
		out = append(out, e)
	}
	return out, true
}

// scopeOf returns the scope a descriptor key's values fill, checked.
func (t *translator) scopeOf(key string) (string, error) {
	scope, ok := t.opts.As[key]
	if !ok {
		switch key {
		case "remote_address":
			scope = "ip"
		default: // masked_remote_address too: a network, counted per value as there
			scope = "header:" + strings.ToLower(key)
		}
	}
	if !strings.HasPrefix(scope, "header:") {
		return scope, nil
	}
	if err, seen := t.scopeOK[scope]; seen {
		return scope, err
	}
	// The header rules are package tiers': ask it.
	_, err := tiers.Load([]byte("rules: [{name: x, key: [" + strconv.Quote(scope) + "], rate: 1/1s}]"))
	if err != nil {
		msg := err.Error()
		if i := strings.Index(msg, ": "); i >= 0 {
			msg = msg[i+2:]
		}
		if i := strings.LastIndex(msg, ", at line"); i >= 0 {
			msg = msg[:i]
		}
		err = fmt.Errorf("as %s: %s; map the key to a scope with -as %s=<scope>", scope, msg, key)
	}
	t.scopeOK[scope] = err
	return scope, err
}
