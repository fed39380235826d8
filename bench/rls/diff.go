package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	extrlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate/rls/translate"
	"github.com/floodgate-go/floodgate/testing/redistest"
)

// The differential test (-diff): envoyproxy/ratelimit and floodgate-rls,
// each on its own redis-server, serve the same configurations
// (diffConfigs; floodgate-rls through rls/translate) and answer the same
// sequences of calls (diffSeqs); every difference in an answer's overall
// code and, per descriptor, code, current_limit (requests_per_unit, unit,
// unit_multiplier, name) and limit_remaining is classified by kind.
// duration_until_reset is not compared.

// Kinds of difference. The documented ones are what floodgate-rls's
// documentation (package rls) promises; any other kind fails the test.
const (
	kindAllOrNothing = "all-or-nothing: a denied call charged nothing"
	kindShadow       = "shadow display: no current_limit within a shadow limit"
	kindName         = "current_limit.name: the rule's name where the configuration names none"

	kindRefused        = "config refused by translate"
	kindCallRefused    = "call refused by floodgate-rls"
	kindOverRemaining  = "limit_remaining above 0 on OVER_LIMIT"
	kindCode           = "descriptor code"
	kindRemaining      = "limit_remaining"
	kindLimit          = "current_limit"
	kindLimitName      = "current_limit.name"
	kindOverall        = "overall_code"
	kindEnvoyError     = "envoyproxy/ratelimit error"
	kindFloodgateError = "floodgate-rls error"
	kindStatusCount    = "number of statuses"
	kindWindowCrossed  = "window crossed"
	kindAfterRefused   = "after a refused call: counted by envoyproxy/ratelimit only"
	kindEmptyValue     = "empty value not limited"
	kindShadowOver     = "shadow_mode over its limit without current_limit"
	kindNoLimit        = "limit_remaining 4294967295 where envoyproxy/ratelimit has no limit"
)

// documentedKinds are counted and pass.
var documentedKinds = map[string]bool{kindAllOrNothing: true, kindShadow: true, kindName: true}

// openKinds are differences floodgate-rls still has, each allowed only in
// the sequences named, with why: they are printed as open, and counted,
// but a difference of such a kind anywhere else fails, as does any kind
// that is neither documented nor open. The list only shrinks: once a kind
// is fixed, its entry goes, and it fails again if it comes back.
var openKinds = map[string]openKind{}

// openKind is an open difference: where it is allowed, and why.
type openKind struct {
	seqs []string
	why  string
}

// open reports whether d is an open difference in a sequence its kind
// allows.
func open(d diffRecord) bool {
	o, ok := openKinds[d.kind]
	return ok && slices.Contains(o.seqs, d.seq)
}

// diffRecord is one difference: its kind, where, and both answers.
type diffRecord struct {
	kind   string
	seq    string
	call   int // index in the sequence
	detail string
}

// diffResult is a whole run.
type diffResult struct {
	refused  map[string]string // configuration -> translate's error
	seqs     int
	calls    int
	compared int
	records  []diffRecord
	// trace, when set, is every call with both answers.
	trace io.Writer
	// second names the service compared with envoyproxy/ratelimit.
	second string
}

func (r *diffResult) add(kind, seq string, call int, format string, args ...any) {
	r.records = append(r.records, diffRecord{kind: kind, seq: seq, call: call, detail: fmt.Sprintf(format, args...)})
}

// failed reports whether any difference is of a kind that is neither
// documented nor open where it was found.
func (r *diffResult) failed() bool {
	for _, d := range r.records {
		if !documentedKinds[d.kind] && !open(d) {
			return true
		}
	}
	return false
}

// diffRun is the -diff mode of the program.
//
// With self set, the second service is a second envoyproxy/ratelimit
// instead of floodgate-rls: a check of the harness itself, which must
// find no difference.
func diffRun(self bool, log, trace io.Writer, stdout, stderr io.Writer) error {
	work, err := os.MkdirTemp("", "floodgate-rls-diff")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	envoyBin, err := buildRatelimit(stderr)
	if err != nil {
		return fmt.Errorf("envoyproxy/ratelimit: %w", err)
	}
	fgBin := ""
	if !self {
		if fgBin, err = buildFloodgate(); err != nil {
			return fmt.Errorf("floodgate-rls: %w", err)
		}
	}
	res, err := diffServe(envoyBin, fgBin, work, log, trace, stderr)
	if err != nil {
		return err
	}
	printDiff(stdout, res, self)
	if res.failed() {
		return errDiffFailed
	}
	return nil
}

// errDiffFailed: differences of kinds that are not documented.
var errDiffFailed = errors.New("differences of kinds that are not documented (above)")

// diffPolicy translates the configurations translate accepts, together
// (one floodgate-rls serves every domain, as one envoyproxy/ratelimit
// does), and names the ones it refuses, with its error.
func diffPolicy(cfgs []diffConfig) (policy []byte, accepted []diffConfig, refused map[string]string, err error) {
	refused = map[string]string{}
	opts := func(cs []diffConfig) ([]translate.File, translate.Options) {
		var files []translate.File
		// Both services merge a domain given in several files
		// (envoyproxy/ratelimit runs with MERGE_DOMAIN_CONFIG=true).
		o := translate.Options{As: map[string]string{}, MergeDomains: true}
		for _, c := range cs {
			for _, f := range c.files {
				files = append(files, translate.File{Name: f.name, Data: []byte(f.yaml)})
			}
			maps.Copy(o.As, c.as)
			o.IgnoreMetricOptions = o.IgnoreMetricOptions || c.ignoreMetrics
		}
		return files, o
	}
	for _, c := range cfgs {
		files, o := opts([]diffConfig{c})
		if _, err := translate.Translate(files, o); err != nil {
			refused[c.name] = err.Error()
			continue
		}
		accepted = append(accepted, c)
	}
	files, o := opts(accepted)
	policy, err = translate.Translate(files, o)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("translating the accepted configurations together: %w", err)
	}
	return policy, accepted, refused, nil
}

// diffServe starts both services, each on its own redis-server, runs
// every sequence and classifies the differences. Without fgBin, the
// second service is envoyproxy/ratelimit too.
func diffServe(envoyBin, fgBin, work string, log, trace, stderr io.Writer) (*diffResult, error) {
	policy, accepted, refused, err := diffPolicy(diffConfigs)
	if err != nil {
		return nil, err
	}
	model, err := newRLModel(diffConfigs)
	if err != nil {
		return nil, err
	}
	var redises [2]*redistest.Process
	for i := range redises {
		p, err := redistest.StartProcessHandle()
		if err != nil {
			return nil, err
		}
		defer p.Stop()
		redises[i] = p
	}

	// envoyproxy/ratelimit: every file, merging a domain given twice.
	sub := "ratelimit-diff"
	cfgDir := filepath.Join(work, sub, "config")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		return nil, err
	}
	for _, c := range diffConfigs {
		for _, f := range c.files {
			if err := os.WriteFile(filepath.Join(cfgDir, f.name), []byte(f.yaml), 0o644); err != nil {
				return nil, err
			}
		}
	}
	envoy, err := startRatelimitDir(envoyBin, work, sub, redises[0].Addr(), []string{"MERGE_DOMAIN_CONFIG=true"}, log)
	if err != nil {
		return nil, err
	}
	defer envoy.stop()
	var fg *contender
	if fgBin == "" {
		fg, err = startRatelimitDir(envoyBin, work, sub, redises[1].Addr(), []string{"MERGE_DOMAIN_CONFIG=true"}, log)
		accepted, refused = diffConfigs, nil
	} else {
		policyPath := filepath.Join(work, "diff-policy.yaml")
		if err := os.WriteFile(policyPath, policy, 0o644); err != nil {
			return nil, err
		}
		fg, err = startFloodgatePolicy(fgBin, policyPath, "floodgate-rls", redises[1].Addr(), false, log)
	}
	if err != nil {
		return nil, err
	}
	defer fg.stop()
	probe := call("shop", 0, dsc("remote_address", "192.0.2.250"))
	for _, c := range []*contender{envoy, fg} {
		if err := waitReady(c, probe); err != nil {
			return nil, err
		}
	}
	var clients [2]rlsv3.RateLimitServiceClient
	for i, c := range []*contender{envoy, fg} {
		conn, err := grpc.NewClient(c.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		clients[i] = rlsv3.NewRateLimitServiceClient(conn)
	}
	var rcs [2]*redis.Client
	for i, p := range redises {
		rcs[i] = redis.NewClient(&redis.Options{Addr: p.Addr()})
		defer rcs[i].Close()
	}

	active := map[string]bool{}
	for _, c := range accepted {
		for _, f := range c.files {
			active[domainOf(f.yaml)] = true
		}
	}
	// Every sequence runs within one minute (every unit here is a minute
	// or longer, and windows are aligned on the epoch in both): a run
	// that crossed one is run again, once, on flushed servers. A run
	// takes under a second (0.6-0.9 s with two CPU-bound processes
	// beside it at load 20), so 10 s left of the minute is plenty.
	var res *diffResult
	for attempt := 0; attempt < 2; attempt++ {
		if err := alignWindow(10 * time.Second); err != nil {
			return nil, err
		}
		for _, rc := range rcs {
			if err := rc.FlushAll(context.Background()).Err(); err != nil {
				return nil, err
			}
		}
		minute := time.Now().Unix() / 60
		second := "floodgate"
		if fgBin == "" {
			second = "envoyproxy"
		}
		res, err = runSeqs(clients, model, active, trace, second)
		if err != nil {
			return nil, err
		}
		if time.Now().Unix()/60 == minute {
			break
		}
		fmt.Fprintln(stderr, "rls diff: the run crossed a minute boundary; running it again")
		if attempt == 1 {
			res.add(kindWindowCrossed, "", 0, "two runs crossed a minute boundary: the machine is too slow")
		}
	}
	res.refused = refused
	for _, c := range diffConfigs {
		if msg, ok := refused[c.name]; ok {
			res.add(kindRefused, c.name, -1, "%s", firstLine(msg))
		}
	}
	return res, nil
}

// alignWindow returns at once when at least need is left of the current
// minute, else after the next minute begins (at most a minute).
func alignWindow(need time.Duration) error {
	now := time.Now()
	next := now.Truncate(time.Minute).Add(time.Minute)
	if next.Sub(now) >= need {
		return nil
	}
	time.Sleep(next.Sub(now) + 100*time.Millisecond)
	return nil
}

func domainOf(y string) string {
	first, _, _ := strings.Cut(y, "\n")
	return strings.TrimSpace(strings.TrimPrefix(first, "domain:"))
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// runSeqs sends every call of every sequence to both services in turn
// and compares the answers. A sequence whose domain floodgate-rls does
// not serve (its configuration was refused) is sent to neither.
func runSeqs(clients [2]rlsv3.RateLimitServiceClient, model rlModel, active map[string]bool, trace io.Writer, second string) (*diffResult, error) {
	res := &diffResult{trace: trace, second: second}
	cmp := newComparer(model)
	for _, s := range diffSeqs {
		if !seqActive(s, model, active) {
			continue
		}
		res.seqs++
		for i, c := range s.calls {
			res.calls++
			var answers [2]*rlsv3.RateLimitResponse
			var errs [2]error
			for j, cl := range clients {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				answers[j], errs[j] = cl.ShouldRateLimit(ctx, c)
				cancel()
			}
			cmp.compare(res, s.name, i, c, answers[0], errs[0], answers[1], errs[1])
		}
	}
	return res, nil
}

// seqActive: every domain the sequence calls is served by both, or
// unknown to both.
func seqActive(s diffSeq, model rlModel, active map[string]bool) bool {
	for _, c := range s.calls {
		if _, known := model[c.Domain]; known && !active[c.Domain] {
			return false
		}
	}
	return true
}

// comparer compares answers and keeps, per envoyproxy/ratelimit counter,
// the hits each service charged: envoyproxy/ratelimit charges every
// limited descriptor of every call (over the limit too, at its default
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false), floodgate-rls every
// limited descriptor of an allowed call only. Where the two counts
// differ, an answer that differs by exactly what floodgate-rls did not
// charge is the documented all-or-nothing difference.
type comparer struct {
	model rlModel
	hits  [2]map[string]uint64 // envoyproxy, floodgate
	// refused counts the hits of calls floodgate-rls refused.
	refused map[string]uint64
}

func newComparer(m rlModel) *comparer {
	return &comparer{model: m, hits: [2]map[string]uint64{{}, {}}, refused: map[string]uint64{}}
}

func (c *comparer) compare(res *diffResult, seq string, i int, req *rlsv3.RateLimitRequest, env *rlsv3.RateLimitResponse, envErr error, fg *rlsv3.RateLimitResponse, fgErr error) {
	show := func() string {
		return fmt.Sprintf("call %s\n      envoyproxy: %s\n      %-11s %s", callString(req), answerString(env, envErr), res.second+":", answerString(fg, fgErr))
	}
	if res.trace != nil {
		fmt.Fprintf(res.trace, "%s #%d: %s\n", seq, i+1, show())
	}
	if envErr != nil {
		res.add(kindEnvoyError, seq, i, "%s", show())
		return
	}
	res.compared++
	hits := descriptorHits(req)
	counters := make([]string, len(req.Descriptors))
	for k, d := range req.Descriptors {
		if st := env.Statuses[k]; st.CurrentLimit != nil {
			m, _ := c.model.lookup(req.Domain, d)
			ctr := m.counter
			if d.Limit != nil || ctr == "" {
				ctr = req.Domain
				for _, e := range d.Entries {
					ctr += "|" + e.Key + "=" + e.Value
				}
			}
			counters[k] = ctr + "|" + st.CurrentLimit.Unit.String()
		}
	}
	// What envoyproxy/ratelimit counted and floodgate-rls did not, by
	// the end of this call: the calls floodgate-rls denied, this one
	// included (it answers a denied call's other descriptors with what
	// they had left, uncharged), and apart, the calls it refused.
	denied := fgErr == nil && fg.OverallCode != rlsv3.RateLimitResponse_OK
	offsets := make([]int64, len(req.Descriptors))
	refusedOff := make([]int64, len(req.Descriptors))
	for k, ctr := range counters {
		if ctr != "" {
			refusedOff[k] = int64(c.refused[ctr])
			offsets[k] = int64(c.hits[0][ctr]) - int64(c.hits[1][ctr]) - refusedOff[k]
			if denied {
				offsets[k] += int64(hits[k])
			}
		}
	}
	defer func() {
		for k, ctr := range counters {
			if ctr == "" {
				continue
			}
			c.hits[0][ctr] += hits[k]
			switch {
			case fgErr != nil:
				c.refused[ctr] += hits[k]
			case !denied:
				c.hits[1][ctr] += hits[k]
			}
		}
	}()
	if fgErr != nil {
		kind := kindFloodgateError
		if status.Code(fgErr) == codes.InvalidArgument {
			kind = kindCallRefused
		}
		res.add(kind, seq, i, "%s", show())
		return
	}
	if len(fg.Statuses) != len(env.Statuses) {
		res.add(kindStatusCount, seq, i, "%s", show())
		return
	}
	var kinds []string
	codeDiffers := false // a descriptor's code differs, and its kind says why
	for k, d := range req.Descriptors {
		e, f := env.Statuses[k], fg.Statuses[k]
		m, _ := c.model.lookup(req.Domain, d)
		limitSame := sameLimit(e.CurrentLimit, f.CurrentLimit)
		if limitSame && e.Code == f.Code && e.LimitRemaining == f.LimitRemaining {
			continue
		}
		if e.Code != f.Code {
			codeDiffers = true
		}
		switch {
		case limitSame:
		case m.shadow && e.CurrentLimit != nil && f.CurrentLimit == nil && e.Code == rlsv3.RateLimitResponse_OK && f.Code == rlsv3.RateLimitResponse_OK:
			// Documented within the limit only (by what floodgate-rls
			// charged): over it, the limit is shown.
			if c.hits[1][counters[k]]+hits[k] <= uint64(e.CurrentLimit.RequestsPerUnit) {
				kinds = append(kinds, kindShadow)
			} else {
				kinds = append(kinds, kindShadowOver)
			}
			continue
		case e.CurrentLimit != nil && f.CurrentLimit == nil && hasEmptyValue(d):
			kinds = append(kinds, kindEmptyValue)
			continue
		case e.CurrentLimit != nil && f.CurrentLimit != nil && sameRate(e.CurrentLimit, f.CurrentLimit):
			if e.CurrentLimit.Name == "" && strings.HasPrefix(f.CurrentLimit.Name, req.Domain+".") {
				kinds = append(kinds, kindName)
			} else {
				kinds = append(kinds, kindLimitName)
			}
		default:
			kinds = append(kinds, kindLimit)
			continue
		}
		if e.Code == f.Code && e.LimitRemaining == f.LimitRemaining {
			continue
		}
		switch {
		case c.ownCount(f, counters[k], hits[k], denied) && allOrNothing(e, f, offsets[k], m.shadow):
			kinds = append(kinds, kindAllOrNothing)
		case refusedOff[k] > 0 && c.ownCount(f, counters[k], hits[k], denied) && allOrNothing(e, f, offsets[k]+refusedOff[k], m.shadow):
			kinds = append(kinds, kindAfterRefused)
		case e.Code == f.Code && f.Code == rlsv3.RateLimitResponse_OVER_LIMIT && e.LimitRemaining == 0:
			kinds = append(kinds, kindOverRemaining)
		case e.Code != f.Code:
			kinds = append(kinds, kindCode)
		case e.CurrentLimit == nil && e.LimitRemaining == 0 && f.LimitRemaining == math.MaxUint32:
			kinds = append(kinds, kindNoLimit)
		default:
			kinds = append(kinds, kindRemaining)
		}
	}
	// A different overall code follows from a descriptor's different
	// code, whose kind is counted; alone, it is a kind of its own.
	if env.OverallCode != fg.OverallCode && !codeDiffers {
		kinds = append(kinds, kindOverall)
	}
	slices.Sort(kinds)
	for _, k := range slices.Compact(kinds) {
		res.add(k, seq, i, "%s", show())
	}
}

// ownCount: f's limit_remaining is what floodgate-rls has left by its
// own count, every allowed call charged (this one too unless denied):
// an answer that differs from envoyproxy/ratelimit's by the hits
// floodgate-rls did not charge, but not from its own count.
func (c *comparer) ownCount(f *rlsv3.RateLimitResponse_DescriptorStatus, ctr string, hits uint64, denied bool) bool {
	if f.CurrentLimit == nil || ctr == "" {
		return false
	}
	n := c.hits[1][ctr]
	if !denied {
		n += hits
	}
	want := uint64(0)
	if rpu := uint64(f.CurrentLimit.RequestsPerUnit); n < rpu {
		want = rpu - n
	}
	return uint64(f.LimitRemaining) == want
}

func hasEmptyValue(d *extrlsv3.RateLimitDescriptor) bool {
	for _, e := range d.Entries {
		if e.Value == "" {
			return true
		}
	}
	return false
}

// allOrNothing: f, floodgate-rls's answer, is envoyproxy/ratelimit's
// e once the offset, hits envoyproxy/ratelimit charged and floodgate-rls
// did not, are counted too.
func allOrNothing(e, f *rlsv3.RateLimitResponse_DescriptorStatus, offset int64, shadow bool) bool {
	if offset <= 0 || f.CurrentLimit == nil || f.Code != rlsv3.RateLimitResponse_OK {
		return false
	}
	r := int64(f.LimitRemaining)
	wantCode, wantRem := rlsv3.RateLimitResponse_OK, r-offset
	if offset > r {
		wantRem = 0
		if !shadow {
			wantCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
	}
	return e.Code == wantCode && int64(e.LimitRemaining) == wantRem
}

func sameRate(a, b *rlsv3.RateLimitResponse_RateLimit) bool {
	return a.RequestsPerUnit == b.RequestsPerUnit && a.Unit == b.Unit && max(a.UnitMultiplier.GetValue(), 1) == max(b.UnitMultiplier.GetValue(), 1)
}

func sameLimit(a, b *rlsv3.RateLimitResponse_RateLimit) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return sameRate(a, b) && a.Name == b.Name
}

// descriptorHits is what each descriptor of req charges: its own
// hits_addend, else the call's, 0 counting as 1.
func descriptorHits(req *rlsv3.RateLimitRequest) []uint64 {
	out := make([]uint64, len(req.Descriptors))
	for k, d := range req.Descriptors {
		if h := d.HitsAddend; h != nil {
			out[k] = h.Value
		} else {
			out[k] = uint64(max(req.HitsAddend, 1))
		}
	}
	return out
}

func callString(req *rlsv3.RateLimitRequest) string {
	var b strings.Builder
	b.WriteString(req.Domain)
	if req.HitsAddend != 0 {
		b.WriteString(" hits_addend=" + strconv.Itoa(int(req.HitsAddend)))
	}
	for _, d := range req.Descriptors {
		b.WriteString(" [")
		for j, e := range d.Entries {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s=%q", e.Key, e.Value)
		}
		if d.HitsAddend != nil {
			fmt.Fprintf(&b, "; hits_addend=%d", d.HitsAddend.Value)
		}
		if d.Limit != nil {
			fmt.Fprintf(&b, "; limit=%d/%s", d.Limit.RequestsPerUnit, d.Limit.Unit)
		}
		b.WriteString("]")
	}
	return b.String()
}

func answerString(resp *rlsv3.RateLimitResponse, err error) string {
	if err != nil {
		return "error " + err.Error()
	}
	var b strings.Builder
	b.WriteString(resp.OverallCode.String())
	for _, st := range resp.Statuses {
		b.WriteString(" {" + st.Code.String())
		if l := st.CurrentLimit; l != nil {
			fmt.Fprintf(&b, " %d/%s", l.RequestsPerUnit, l.Unit)
			if m := l.UnitMultiplier.GetValue(); m > 1 {
				fmt.Fprintf(&b, "x%d", m)
			}
			if l.Name != "" {
				fmt.Fprintf(&b, " %q", l.Name)
			}
		}
		fmt.Fprintf(&b, " rem=%d}", st.LimitRemaining)
	}
	return b.String()
}

// printDiff prints the summary: the counts by kind (documented ones
// pass), then every difference of a failing kind with its call and both
// answers, and one example of each documented kind.
func printDiff(w io.Writer, r *diffResult, self bool) {
	other := "floodgate-rls (this repository)"
	if self {
		other = "itself (-diff-self: a check of the harness)"
	}
	fmt.Fprintf(w, "rls diff: envoyproxy/ratelimit %s against %s, each on its own redis-server\n", RatelimitVersion, other)
	fmt.Fprintf(w, "  configurations: %d (%d refused by translate); sequences run: %d of %d; calls: %d (%d compared)\n",
		len(diffConfigs), len(r.refused), r.seqs, len(diffSeqs), r.calls, r.compared)
	fmt.Fprintf(w, "  not compared: is_negative_hits (envoyproxy/ratelimit %s predates the field: it drops it and charges the hits)\n", RatelimitVersion)
	count := map[string]int{}
	for _, d := range r.records {
		count[d.kind]++
	}
	kinds := slices.Sorted(maps.Keys(count))
	slices.SortStableFunc(kinds, func(a, b string) int {
		switch {
		case documentedKinds[a] == documentedKinds[b]:
			return 0
		case documentedKinds[a]:
			return 1
		}
		return -1
	})
	fmt.Fprintln(w, "differences by kind:")
	if len(kinds) == 0 {
		fmt.Fprintln(w, "  none")
	}
	for _, k := range kinds {
		tag := "FAIL"
		var seqs []string
		allOpen := true
		for _, d := range r.records {
			if d.kind == k && d.seq != "" && !slices.Contains(seqs, d.seq) {
				seqs = append(seqs, d.seq)
			}
			if d.kind == k && !open(d) {
				allOpen = false
			}
		}
		switch {
		case documentedKinds[k]:
			tag = "documented"
		case allOpen:
			tag = "open: " + openKinds[k].why
		}
		fmt.Fprintf(w, "  %4d  %s  [%s]  in: %s\n", count[k], k, tag, strings.Join(seqs, "; "))
	}
	shown := map[string]bool{}
	for _, d := range r.records {
		if documentedKinds[d.kind] && shown[d.kind] {
			continue
		}
		shown[d.kind] = true
		where := d.seq
		if d.call >= 0 {
			where += " #" + strconv.Itoa(d.call+1)
		}
		label := "example"
		switch {
		case open(d):
			label = "open"
		case !documentedKinds[d.kind]:
			label = "FAIL"
		}
		fmt.Fprintf(w, "%s: %s (%s):\n      %s\n", label, d.kind, where, d.detail)
	}
	if r.failed() {
		fmt.Fprintln(w, "result: FAIL: differences of kinds that are not documented")
	} else {
		fmt.Fprintln(w, "result: ok: only documented and open differences")
	}
}

// diff runs the differential test with the program's -log setting.
func diff(cfg config, stdout, stderr io.Writer) error {
	var childLog io.Writer = io.Discard
	if cfg.logPath != "" {
		f, err := os.Create(cfg.logPath)
		if err != nil {
			return err
		}
		defer f.Close()
		childLog = f
	}
	var trace io.Writer
	if cfg.verbose {
		trace = stdout
	}
	return diffRun(cfg.diffSelf, childLog, trace, stdout, stderr)
}
