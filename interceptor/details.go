package interceptor

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/floodgate-go/floodgate"
)

// fixedDetails are the details of a deny that depend on the rule that
// denied, not on the moment: its ErrorInfo and, for a rate or concurrency
// limit that shows its quota, its QuotaFailure (nil otherwise), marshalled
// once. They are shared between calls and never changed.
type fixedDetails struct {
	errorInfo, quota *anypb.Any
}

// detailsKey is what fixedDetails depend on (the stage sets the reason
// and whether there is a QuotaFailure).
type detailsKey struct {
	domain string
	stage  floodgate.Stage
	policy string
	limit  int64
	window time.Duration
	show   bool
	// violated lists a deny's other violated windows (policy, limit and
	// window of each) when it has several (Decision.Quotas), else "".
	violated string
}

// detailsCache holds the fixedDetails of the rules that denied so far, up
// to maxCachedDetails of them (a policy has few rules and tiers; beyond
// the bound, details are marshalled per deny). A deny is frequent exactly
// when a client is over its limit, and marshalling the ErrorInfo's
// metadata map was half of the deny's cost.
var (
	detailsCache  sync.Map // detailsKey -> *fixedDetails
	detailsCached atomic.Int64
)

const maxCachedDetails = 4096

// ruleDetails returns d's fixedDetails, or nil when they cannot be
// marshalled.
func ruleDetails(d floodgate.Decision, sem *floodgate.Semantics, domain string, show bool) *fixedDetails {
	k := detailsKey{domain: domain, stage: d.Stage, show: show}
	if show {
		k.policy, k.limit, k.window = d.Policy, d.Limit, d.Window
		if qs := d.Quotas(); len(qs) >= 2 {
			var b []byte
			for _, q := range qs {
				if q.Violated {
					b = append(b, q.Policy...)
					b = append(b, 0)
					b = strconv.AppendInt(b, q.Limit, 10)
					b = append(b, 0)
					b = strconv.AppendInt(b, int64(q.Window), 10)
					b = append(b, 1)
				}
			}
			k.violated = string(b)
		}
	}
	if v, ok := detailsCache.Load(k); ok {
		return v.(*fixedDetails)
	}
	f := marshalDetails(d, sem, domain, show)
	if f != nil && detailsCached.Load() < maxCachedDetails {
		if _, loaded := detailsCache.LoadOrStore(k, f); !loaded {
			detailsCached.Add(1)
		}
	}
	return f
}

// marshalDetails builds d's ErrorInfo (sem's reason; stage; with show,
// policy, limit and window in seconds) and, with show and a stage whose
// semantics name a quota, its QuotaFailure.
func marshalDetails(d floodgate.Decision, sem *floodgate.Semantics, domain string, show bool) *fixedDetails {
	md := make(map[string]string, 4)
	if d.Stage != "" {
		md["stage"] = string(d.Stage)
	}
	if show {
		md["policy"] = d.Policy
		if d.Limit > 0 {
			md["limit"] = strconv.FormatInt(d.Limit, 10)
		}
		if d.Window > 0 {
			md["window_seconds"] = strconv.FormatInt(ceilSeconds(d.Window), 10)
		}
	}
	ei, err := anypb.New(&errdetails.ErrorInfo{Reason: sem.Reason, Domain: domain, Metadata: md})
	if err != nil {
		return nil // a string that is not UTF-8: no details, as before
	}
	f := &fixedDetails{errorInfo: ei}
	if show && sem.Quota != "" {
		if f.quota, err = anypb.New(&errdetails.QuotaFailure{Violations: quotaViolations(d)}); err != nil {
			return nil
		}
	}
	return f
}
