package guard

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/topk"
	"github.com/floodgate-go/floodgate/policyfile"
	"github.com/floodgate-go/floodgate/tiers"
)

// Denied is one principal among the most denied by one rule over the
// last minute (Guard.TopDenied): Count is how many of its requests the
// rule denied, never fewer than the truth and at most Error more.
type Denied struct {
	// Rule names the rule (a tiers rule, "rule/period" for one of its
	// windows, "deny" for the policy's deny list) or the per-key cap of
	// the in-flight limiter (concurrency: per_key:) that denied.
	Rule string `json:"rule"`
	// Principal is who the rule keys on, as "scope=value" separated by
	// spaces: "ip=203.0.113.66 user=admin", "tenant=acme"; an API key is
	// '#' and 32 hex digits of its SHA-256, as in its bucket's key, never
	// the key (tiers.Limiter.AppendPrincipal writes it). "*" for a rule
	// without key.
	Principal string `json:"principal"`
	// Count is the requests denied; the true count is in
	// [Count-Error, Count].
	Count uint64 `json:"denied"`
	// Error is how much Count may overstate; 0 while the rule met no more
	// distinct principals than the summary holds (the count is exact).
	Error uint64 `json:"error"`
}

// topObserver counts every denial of the rate limits and of the per-key
// in-flight caps in the summary, by rule and principal.
type topObserver struct {
	lim    *tiers.Limiter
	perKey map[string]func(*floodgate.Request) (string, bool)
	sum    *topk.Summary
}

// newTop makes the summary of the guard's denials (the topk defaults: 64
// principals per rule per 10-second slice, over a minute, 64 rules).
func (g *Guard) newTop(file *policyfile.File) error {
	sum, err := topk.New(topk.Config{Clock: g.c.clock})
	if err != nil {
		return fmt.Errorf("guard: denial summary: %w", err)
	}
	o := &topObserver{lim: g.limiter, sum: sum, perKey: map[string]func(*floodgate.Request) (string, bool){}}
	for _, c := range file.PerKey {
		o.perKey[c.Name] = c.Key
	}
	g.top = o
	return nil
}

// principalRoom is the room on the stack for a principal; topk keeps at
// most topk.MaxPrincipal bytes of it (a longer one shortened with a hash).
const principalRoom = 256

// Observe implements floodgate.Observer: a denial of the rate limits is
// counted for its binding rule and every other rule it violated that
// shows its quota (Decision.Quotas); a denial of a per-key in-flight cap
// for the cap.
func (o *topObserver) Observe(_ context.Context, r *floodgate.Request, d floodgate.Decision, _ error) {
	if d.Allowed || r == nil {
		return
	}
	var buf [principalRoom]byte
	switch d.Stage {
	case floodgate.StageTiers:
		o.rule(buf[:0], d.Policy, r)
		for _, q := range d.Quotas() {
			if q.Violated && q.Policy != d.Policy {
				o.rule(buf[:0], q.Policy, r)
			}
		}
	case floodgate.StageConcurrency:
		key := o.perKey[d.Policy]
		if key == nil {
			return // the global cap: no principal
		}
		if p, ok := appendCapKey(buf[:0], key, r); ok {
			o.sum.Record(d.Policy, p)
		}
	}
}

func (o *topObserver) rule(buf []byte, policy string, r *floodgate.Request) {
	if p, ok := o.lim.AppendPrincipal(buf, policy, r); ok {
		o.sum.Record(policy, p)
	}
}

// appendCapKey appends the key a per-key cap of the policy file counted r
// under, written as tiers.Limiter.AppendPrincipal writes a rule's: the
// policy file's caps key on the user, the tenant or the API key (hashed),
// and false for a key of any other kind (so that no value unknown is
// shown raw).
func appendCapKey(b []byte, key func(*floodgate.Request) (string, bool), r *floodgate.Request) ([]byte, bool) {
	k, ok := key(r)
	if !ok || k == "" {
		return b, false
	}
	id := &r.Identity
	switch k {
	case id.APIKey:
		return appendDigest(append(b, "api_key=#"...), k), true
	case id.User:
		b = append(b, "user="...)
	case id.Tenant:
		b = append(b, "tenant="...)
	default:
		return b, false
	}
	if len(k) > 64 { // as tiers hashes a long value
		return appendDigest(append(b, '#'), k), true
	}
	const hexUpper = "0123456789ABCDEF"
	for i := 0; i < len(k); i++ {
		if c := k[i]; c <= ' ' || c >= 0x7f || c == '%' || c == '=' {
			b = append(b, '%', hexUpper[c>>4], hexUpper[c&15])
		} else {
			b = append(b, c)
		}
	}
	return b, true
}

// appendDigest appends the first 16 bytes of SHA-256(s) in hex, as tiers
// writes a hashed key component.
func appendDigest(b []byte, s string) []byte {
	var tmp [principalRoom]byte
	var sum [sha256.Size]byte
	if len(s) <= len(tmp) {
		sum = sha256.Sum256(tmp[:copy(tmp[:], s)])
	} else {
		sum = sha256.Sum256([]byte(s))
	}
	return hex.AppendEncode(b, sum[:16])
}

// TopDenied returns the principals the rule named rule denied most over
// the last minute (between 50 and 60 seconds: six slices of 10 s, the
// oldest forgotten whole), at most n of them, the most denied first; with
// rule "", every rule's, the rules with the most denials first. rule is a
// rule of the policy in force, one of its windows ("rule/1h"), "deny", or
// a per-key cap of concurrency: per_key:; an error names a rule that is
// none of these, and an n outside [1, 64].
//
// The summary behind it is fed by every denial of the rate limits and of
// the per-key in-flight caps (the shedder's and the global cap's denials
// name no principal), from New on, with no code: a denial counts for its
// binding rule and for every other rule it violated whose quota is shown
// (floodgate.Decision.Quotas). Its memory is fixed: 64 principals per
// rule in each of the six slices, 64 rules, about 54 KiB per rule denying
// and 3.4 MiB at most, whatever the number of principals (package
// internal/topk, Space-Saving). A count is exact while a rule meets at
// most 64 distinct principals in each slice; beyond that it may overstate
// by Error (at most the rule's denials over 64), and every principal
// with more than a 64th of a slice's denials is kept. Counting a denial
// allocates nothing.
//
// TopDeniedHandler serves the same over HTTP, for `floodgate top`.
func (g *Guard) TopDenied(rule string, n int) ([]Denied, error) {
	if err := g.checkTop(rule, n); err != nil {
		return nil, err
	}
	groups, _ := g.top.sum.Top(rule, n)
	return flatten(groups), nil
}

func flatten(groups []topk.Group) []Denied {
	out := []Denied{}
	for _, gr := range groups {
		for _, e := range gr.Entries {
			out = append(out, Denied{Rule: e.Key, Principal: e.Principal, Count: e.Count, Error: e.Error})
		}
	}
	return out
}

// checkTop names what is wrong with a rule and a count of TopDenied.
func (g *Guard) checkTop(rule string, n int) error {
	if c := g.top.sum.Capacity(); n < 1 || n > c {
		return fmt.Errorf("guard: TopDenied: n %d must be in [1, %d]", n, c)
	}
	if rule == "" || rule == tiers.PolicyDeny || g.top.perKey[rule] != nil {
		return nil
	}
	name, _, _ := strings.Cut(rule, "/")
	var names []string
	for _, r := range g.limiter.Policy().Rules {
		if r.Name == name {
			return nil
		}
		names = append(names, r.Name)
	}
	for c := range g.top.perKey {
		names = append(names, c)
	}
	slices.Sort(names)
	if len(names) > 20 {
		names = append(names[:20], fmt.Sprintf("and %d more", len(names)-20))
	}
	return fmt.Errorf("guard: TopDenied: %q is no rule of the policy in force nor a per-key cap (%s, or deny)", rule, strings.Join(names, ", "))
}

// topReply is the JSON of TopDeniedHandler.
type topReply struct {
	// IntervalSeconds is the summary's interval, CoveredSeconds the time
	// its slices in use cover now.
	IntervalSeconds float64 `json:"interval_seconds"`
	CoveredSeconds  float64 `json:"covered_seconds"`
	// Rules are the rules with denials, the most first, each with its
	// exact count of denials.
	Rules []topRule `json:"rules"`
	// Top is each rule's most denied principals, by rule in the order of
	// Rules, the most denied first.
	Top []Denied `json:"top"`
	// Dropped counts denials not summarised: 64 rules had denials.
	Dropped uint64 `json:"dropped"`
}

type topRule struct {
	Rule   string `json:"rule"`
	Denied uint64 `json:"denied"`
}

// TopDeniedHandler returns the HTTP handler of TopDenied, for an
// operator's `floodgate top -url`: a GET answers application/json,
//
//	{"interval_seconds": 60, "covered_seconds": 54.2,
//	 "rules": [{"rule": "ip-safety-net", "denied": 5120}, ...],
//	 "top": [{"rule": "ip-safety-net", "principal": "ip=203.0.113.7", "denied": 5002, "error": 0}, ...],
//	 "dropped": 0}
//
// with the query's rule (default every rule) and n (the most principals
// per rule, default 10, at most 64); a bad rule or n is a 400 naming it,
// a method other than GET or HEAD a 405. It shows who is denied, API keys
// hashed: serve it where operators reach it and clients do not (an
// admin listener, as for net/http/pprof), not behind the guard's own
// chain.
func (g *Guard) TopDeniedHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "guard: top denied: method "+req.Method+" not allowed (GET)", http.StatusMethodNotAllowed)
			return
		}
		q := req.URL.Query()
		rule, n := q.Get("rule"), 10
		if s := q.Get("n"); s != "" {
			v, err := strconv.Atoi(s)
			if err != nil {
				http.Error(w, fmt.Sprintf("guard: top denied: n %q is not a whole number", s), http.StatusBadRequest)
				return
			}
			n = v
		}
		if err := g.checkTop(rule, n); err != nil {
			http.Error(w, strings.Replace(err.Error(), "TopDenied", "top denied", 1), http.StatusBadRequest)
			return
		}
		groups, covered := g.top.sum.Top(rule, n)
		reply := topReply{
			IntervalSeconds: g.top.sum.Interval().Seconds(),
			CoveredSeconds:  covered.Seconds(),
			Rules:           []topRule{},
			Top:             flatten(groups),
			Dropped:         g.top.sum.Dropped(),
		}
		for _, gr := range groups {
			reply.Rules = append(reply.Rules, topRule{Rule: gr.Key, Denied: gr.Total})
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(reply)
	})
}
