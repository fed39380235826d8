package tiers

import (
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"
)

// The YAML form of the rls: section, Envoy descriptors mapped to rules
// (see RLSDomain):
//
//	rls:
//	  - domain: edge
//	    descriptors:
//	      - entries: [{key: remote_address, as: ip}]
//	        rule: ip-safety-net
//	      - entries: [{key: generic_key, value: login}, {key: remote_address, as: ip}]
//	        rule: login-ip
//	        method: /auth.v1.Auth/Login
//	      - entries: [{key: generic_key, value: health}]
//	        unlimited: true
//	      - entries: [{key: generic_key, value: status}]
//	        no_limit: true
//	      - entries: [{key: path, value: "/admin*"}]
//	        deny: {window: 1m}
//	        name: admin
//
// Errors name the field path and line like the rest of the loader.

// rls decodes the rls: section into p.RLS.
func (d *decoder) rls(n *yaml.Node, path string, p *Policy) {
	if !d.kind(n, path, yaml.SequenceNode, "a list of domains ({domain, descriptors})") {
		return
	}
	p.RLS = make([]RLSDomain, len(n.Content))
	for i, dn := range n.Content {
		dp := path + "[" + strconv.Itoa(i) + "]"
		d.at(dp, dn)
		dom := &p.RLS[i]
		d.fields(dn, dp, func(key string, v *yaml.Node, fp string) bool {
			switch key {
			case "domain":
				dom.Domain, _ = d.str(v, fp)
			case "quota":
				dom.Quota = d.boolean(v, fp)
			case "descriptors":
				if !d.kind(v, fp, yaml.SequenceNode, "a list") {
					return true
				}
				dom.Descriptors = make([]RLSDescriptor, len(v.Content))
				for j, en := range v.Content {
					d.rlsDescriptor(en, fp+"["+strconv.Itoa(j)+"]", &dom.Descriptors[j])
				}
			default:
				return false
			}
			return true
		})
	}
}

func (d *decoder) rlsDescriptor(n *yaml.Node, path string, r *RLSDescriptor) {
	d.at(path, n)
	d.fields(n, path, func(key string, v *yaml.Node, fp string) bool {
		switch key {
		case "entries":
			if !d.kind(v, fp, yaml.SequenceNode, "a list of {key, value} or {key, as}") {
				return true
			}
			r.Entries = make([]RLSEntry, len(v.Content))
			for k, en := range v.Content {
				ep := fp + "[" + strconv.Itoa(k) + "]"
				d.at(ep, en)
				e := &r.Entries[k]
				d.fields(en, ep, func(ek string, ev *yaml.Node, efp string) bool {
					switch ek {
					case "key":
						e.Key, _ = d.str(ev, efp)
					case "value":
						e.Value, _ = d.str(ev, efp)
						if e.Value == "" {
							d.fail(efp, ev, "must not be empty (omit value and set as to take any value)")
						}
					case "as":
						e.As, _ = d.str(ev, efp)
					default:
						return false
					}
					return true
				})
			}
		case "rule":
			r.Rule, _ = d.str(v, fp)
		case "method":
			r.Method, _ = d.str(v, fp)
		case "unlimited":
			r.Unlimited = d.boolean(v, fp)
		case "no_limit":
			r.NoLimit = d.boolean(v, fp)
		case "deny":
			r.Deny = &RLSDeny{}
			d.fields(v, fp, func(dk string, dv *yaml.Node, dfp string) bool {
				switch dk {
				case "window":
					if s, ok := d.str(dv, dfp); ok {
						w, err := time.ParseDuration(s)
						if err != nil || w <= 0 {
							d.fail(dfp, dv, "%q is not a positive duration such as 1m", s)
						} else {
							r.Deny.Window = w
						}
					}
				case "shadow":
					r.Deny.Shadow = d.boolean(dv, dfp)
				default:
					return false
				}
				return true
			})
		case "name":
			r.Name, _ = d.str(v, fp)
		case "replaces":
			r.Replaces = d.rlsNames(v, fp)
		default:
			return false
		}
		return true
	})
}

// rlsNames decodes a list of strings.
func (d *decoder) rlsNames(n *yaml.Node, path string) []string {
	if !d.kind(n, path, yaml.SequenceNode, "a list of names") {
		return nil
	}
	out := make([]string, len(n.Content))
	for i, e := range n.Content {
		ep := path + "[" + strconv.Itoa(i) + "]"
		d.at(ep, e)
		out[i], _ = d.str(e, ep)
	}
	return out
}
