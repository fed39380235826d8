package policyfile

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
)

// The per-key caps' part of the file: concurrency: per_key:, a list of
// caps of the *concurrency.Limiter of Targets.Concurrency. Everything
// about them is here, but for the File.PerKey field, its schema entries
// and the calls from the decoder, validate, check, apply and capture.

// perKeyScopes are the identities a per_key cap's key: may name, and the
// key function of each: the request's own field, so Admit allocates
// nothing; a request without it is not counted by the cap.
var perKeyScopes = map[string]func(*floodgate.Request) (string, bool){
	"user":    func(r *floodgate.Request) (string, bool) { return r.Identity.User, r.Identity.User != "" },
	"tenant":  func(r *floodgate.Request) (string, bool) { return r.Identity.Tenant, r.Identity.Tenant != "" },
	"api_key": func(r *floodgate.Request) (string, bool) { return r.Identity.APIKey, r.Identity.APIKey != "" },
}

// perKeyPath is the path of the i-th cap of concurrency: per_key:.
func perKeyPath(i int) string { return "concurrency.per_key[" + strconv.Itoa(i) + "]" }

// schemaPath is path without its list indices, as schema lists it:
// "concurrency.per_key[2]" -> "concurrency.per_key".
func schemaPath(path string) string {
	for {
		i := strings.IndexByte(path, '[')
		if i < 0 {
			return path
		}
		j := strings.IndexByte(path[i:], ']')
		if j < 0 {
			return path
		}
		path = path[:i] + path[i+j+1:]
	}
}

// perKey decodes concurrency: per_key: at n, a list of caps.
func (d *decoder) perKey(n *yaml.Node, path string) []concurrency.PerKey {
	if !d.kind(n, path, yaml.SequenceNode, "a list") {
		return nil
	}
	caps := make([]concurrency.PerKey, 0, len(n.Content))
	for i, item := range n.Content {
		ip := perKeyPath(i)
		d.rep.lines[ip] = item.Line
		var c concurrency.PerKey
		d.fields(item, ip, func(k string, v *yaml.Node, fp string) {
			switch k {
			case "name":
				c.Name, _ = d.str(v, fp)
			case "key":
				if s, ok := d.str(v, fp); ok {
					if c.Key = perKeyScopes[s]; c.Key == nil {
						d.rep.fail(fp, v, "unknown key %q (want user, tenant or api_key)", s)
					}
				}
			case "cap":
				c.Cap = d.integer(v, fp)
			case "max_keys":
				c.MaxKeys = d.count(v, fp)
			}
		})
		caps = append(caps, c)
	}
	return caps
}

// validatePerKey reports what is wrong with the file's per-key caps, by
// the path of each key: what concurrency.WithPerKey would refuse, and a
// name used twice or taken by the global cap.
func validatePerKey(rep *reporter, f *File) {
	if len(f.PerKey) > concurrency.MaxPerKeyCaps {
		rep.add("concurrency.per_key", fmt.Sprintf("%d caps, at most %d", len(f.PerKey), concurrency.MaxPerKeyCaps))
	}
	first := map[string]int{}
	for i, c := range f.PerKey {
		p := perKeyPath(i)
		switch {
		case c.Name == "":
			rep.add(p+".name", "required: the cap's policy name, as decisions report it")
		case strings.Contains(c.Name, ":"):
			rep.add(p+".name", fmt.Sprintf("%q contains ':'", c.Name))
		case c.Name == concurrency.DefaultPolicy:
			rep.add(p+".name", fmt.Sprintf("%q is the global cap's policy name", c.Name))
		default:
			if j, dup := first[c.Name]; dup {
				rep.add(p+".name", fmt.Sprintf("%q is the name of concurrency.per_key[%d] too", c.Name, j))
			} else {
				first[c.Name] = i
			}
		}
		if c.Key == nil {
			rep.add(p+".key", "required: user, tenant or api_key")
		}
		if c.Cap < 1 {
			rep.add(p+".cap", fmt.Sprintf("%d must be at least 1", c.Cap))
		}
		if c.MaxKeys < 0 {
			rep.add(p+".max_keys", fmt.Sprintf("%d is negative", c.MaxKeys))
		}
	}
}

// checkPerKey reports the file's per-key caps that t's Limiter has no cap
// of (a cap is made with the Limiter, never by a reload), or that t has
// no Limiter.
func checkPerKey(rep *reporter, t Targets, f *File) {
	if len(f.PerKey) == 0 {
		return
	}
	if t.Concurrency == nil {
		missing(rep, "concurrency.per_key", "a concurrency Limiter's", "Concurrency")
		return
	}
	var have []string
	for _, c := range t.Concurrency.PerKeyCaps() {
		have = append(have, strconv.Quote(c.Name))
	}
	for i, c := range f.PerKey {
		if slices.Contains(have, strconv.Quote(c.Name)) {
			continue
		}
		caps := "none"
		if len(have) > 0 {
			caps = strings.Join(have, ", ")
		}
		rep.add(perKeyPath(i)+".name", fmt.Sprintf(
			"the Limiter has no per-key cap %q (its caps: %s): a per-key cap is made with the Limiter, so adding one takes a restart, not a reload", c.Name, caps))
	}
}

// applyPerKey sets each per-key cap of t's Limiter to the file's cap of
// its name, or to base (what it had when Watch started) when the file
// has none of that name.
func applyPerKey(t Targets, f *File, base []concurrency.PerKey) []error {
	var errs []error
	for _, c := range base {
		if i := slices.IndexFunc(f.PerKey, func(p concurrency.PerKey) bool { return p.Name == c.Name }); i >= 0 {
			c = f.PerKey[i]
		}
		errs = append(errs, t.Concurrency.SetPerKey(c))
	}
	return errs
}
