package interceptor

import (
	"strconv"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/encoding/protowire"
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

// retryInfoURL is the type URL anypb.New gives a RetryInfo.
var retryInfoURL = "type.googleapis.com/" + string((&errdetails.RetryInfo{}).ProtoReflect().Descriptor().FullName())

// retryInfo returns a RetryInfo of delay d (positive) as an Any, encoded
// without reflection: the bytes proto.Marshal gives the message (field 1,
// a Duration of seconds and nanos, its zero fields left out). Marshalling
// it through anypb.New was a fifth of a deny's cost in the interceptor.
func retryInfo(d time.Duration) *anypb.Any {
	sec, nanos := int64(d/time.Second), int64(d%time.Second)
	var dur [24]byte
	b := dur[:0]
	if sec != 0 {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(sec))
	}
	if nanos != 0 {
		b = protowire.AppendTag(b, 2, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(nanos))
	}
	v := make([]byte, 0, 2+len(b))
	v = protowire.AppendTag(v, 1, protowire.BytesType)
	v = protowire.AppendBytes(v, b)
	return &anypb.Any{TypeUrl: retryInfoURL, Value: v}
}

// detailsKey is what fixedDetails depend on (the stage sets the reason
// and whether there is a QuotaFailure), but for a deny's other violated
// windows (detailsEntry).
type detailsKey struct {
	domain string
	stage  floodgate.Stage
	policy string
	limit  int64
	window time.Duration
	show   bool
}

// detailsEntry holds a detailsKey's fixedDetails: one for a deny with a
// single violated window, and the rest by the list of a deny's violated
// windows when it has several (Decision.Quotas: policy, limit and window
// of each).
type detailsEntry struct {
	one   *fixedDetails
	multi map[string]*fixedDetails
}

// detailsCache holds the fixedDetails of the rules that denied so far, up
// to maxCachedDetails of them (a policy has few rules and tiers; beyond
// the bound, details are marshalled per deny). A deny is frequent exactly
// when a client is over its limit, and marshalling the ErrorInfo's
// metadata map was half of the deny's cost. A lookup allocates nothing:
// the violated windows are listed in a buffer on the stack, and a map
// indexed by string(b) does not copy b.
var (
	detailsMu     sync.RWMutex
	detailsCache  = map[detailsKey]*detailsEntry{}
	detailsCached int
)

const maxCachedDetails = 4096

// ruleDetails returns d's fixedDetails, or nil when they cannot be
// marshalled.
func ruleDetails(d floodgate.Decision, sem *floodgate.Semantics, domain string, show bool) *fixedDetails {
	k := detailsKey{domain: domain, stage: d.Stage, show: show}
	var buf [128]byte
	violated := buf[:0]
	if show {
		k.policy, k.limit, k.window = d.Policy, d.Limit, d.Window
		if qs := d.Quotas(); len(qs) >= 2 {
			for _, q := range qs {
				if q.Violated {
					violated = append(violated, q.Policy...)
					violated = append(violated, 0)
					violated = strconv.AppendInt(violated, q.Limit, 10)
					violated = append(violated, 0)
					violated = strconv.AppendInt(violated, int64(q.Window), 10)
					violated = append(violated, 1)
				}
			}
		}
	}
	detailsMu.RLock()
	var f *fixedDetails
	if e := detailsCache[k]; e != nil {
		if len(violated) == 0 {
			f = e.one
		} else {
			f = e.multi[string(violated)]
		}
	}
	detailsMu.RUnlock()
	if f != nil {
		return f
	}
	if f = marshalDetails(d, sem, domain, show); f != nil {
		cacheDetails(k, string(violated), f)
	}
	return f
}

// cacheDetails keeps f as the fixedDetails of k and violated, unless the
// cache is full or holds them already.
func cacheDetails(k detailsKey, violated string, f *fixedDetails) {
	detailsMu.Lock()
	defer detailsMu.Unlock()
	if detailsCached >= maxCachedDetails {
		return
	}
	e := detailsCache[k]
	if e == nil {
		e = &detailsEntry{}
		detailsCache[k] = e
	}
	switch {
	case violated == "" && e.one == nil:
		e.one = f
	case violated == "" || e.multi[violated] != nil:
		return
	default:
		if e.multi == nil {
			e.multi = make(map[string]*fixedDetails)
		}
		e.multi[violated] = f
	}
	detailsCached++
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
