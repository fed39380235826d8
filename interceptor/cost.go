package interceptor

import (
	"context"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/floodgate-go/floodgate"
)

// WithCost sets the estimate of each call's cost. f estimates what a call
// will cost before it is admitted, from what is known of it then: its
// method and its metadata (the decoded request message of a unary gRPC
// call, the HTTP request; see Metadata). A positive value f returns
// becomes Request.Cost, replacing the method's cost (the policy's
// methods:, WithMethods, the proto annotation), and 0 keeps it. It is what
// a rate-limit rule that settles (tiers.Rule.Settle) charges at admission
// when the rule has no cost of its own: for a completion, say, the
// request's max_tokens. The handler then reports the actual cost with
// floodgate.ReportCost and the difference is settled when the call ends. A
// negative estimate is a bug in f: it is logged (at most once per 10 s)
// and ignored. Rules that charge a named meter (tiers.Rule.Meter) do not
// charge Request.Cost: f estimates those meters by reporting them on ctx
// with floodgate.ReportMeter (a server call's ctx carries its Request;
// an outgoing call's does not), and the handler's later reports replace
// them.
func WithCost(f func(ctx context.Context, method string, md Metadata) int64) Option {
	return func(c *config) {
		if f == nil {
			c.fail("WithCost: func is nil")
			return
		}
		c.cost, c.builds = f, true
	}
}

// estimate applies the WithCost func to r.
func (i *Interceptor) estimate(ctx context.Context, r *floodgate.Request, cl *call) {
	switch n := i.c.cost(ctx, cl.method, cl.md); {
	case n > 0:
		r.Cost = n
	case n < 0:
		logThrottled(&costLog, "floodgate: ignoring a negative cost estimate from WithCost", "method", cl.method, "cost", n)
	}
}

var costLog atomic.Int64

// serverTimingHeader is the header (HTTP) and metadata key (gRPC) that reports
// how long a rate-limit stage held an admitted call before letting it
// proceed (floodgate.Decision.Waited; rules with max_wait), as a W3C
// Server-Timing metric: "floodgate-wait;dur=250" (milliseconds, up to
// three decimals). Nothing is sent for a call that did not wait.
const serverTimingHeader = "Server-Timing"

// waitMetric is the Server-Timing metric name of a wait.
const waitMetric = "floodgate-wait"

// serverTiming formats a wait as a Server-Timing metric.
func serverTiming(d time.Duration) string {
	return waitMetric + ";dur=" + strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', -1, 64)
}

// waitHeader adds the Server-Timing metric of an HTTP call that waited.
func waitHeader(w http.ResponseWriter, d floodgate.Decision) {
	if d.Waited > 0 {
		w.Header().Add(serverTimingHeader, serverTiming(d.Waited))
	}
}

// waitMD sends the Server-Timing metric of a gRPC call that waited, in
// its response headers.
func waitMD(ctx context.Context, d floodgate.Decision) {
	if d.Waited > 0 {
		_ = grpc.SetHeader(ctx, metadata.Pairs("server-timing", serverTiming(d.Waited)))
	}
}

// waitStreamMD is waitMD for a stream.
func waitStreamMD(ss grpc.ServerStream, d floodgate.Decision) {
	if d.Waited > 0 {
		_ = ss.SetHeader(metadata.Pairs("server-timing", serverTiming(d.Waited)))
	}
}
