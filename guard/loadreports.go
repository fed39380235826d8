package guard

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/orca"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/internal/load"
	"github.com/floodgate-go/floodgate/shedder"
)

// LoadReport is the load this instance reports to its gRPC clients'
// balancers (WithLoadReports): one window of what the chain saw.
type LoadReport struct {
	// Utilization is sent as the ORCA application_utilization: the
	// largest, over the shedder, the in-flight limiter and the adaptive
	// limit, of requests in flight over the capacity or cap they are
	// held against, averaged over the window's arrivals. 1 is a stage
	// full; the shedder sheds below it, from its priorities' thresholds.
	Utilization float64
	// Stage is the stage nearest to refusing over the window:
	// "shedder", "concurrency" (the in-flight limiter) or
	// "concurrency.adaptive".
	Stage string
	// QPS is the requests the chain saw per second (ORCA
	// rps_fractional), admitted or not; EPS (ORCA eps) the ones the
	// shedders and the in-flight limiters refused, per second.
	QPS, EPS float64
	// Window is how long the window lasted.
	Window time.Duration
}

// WithLoadReports makes the Guard tell gRPC clients how loaded this
// instance is, as ORCA load reports (gRFC A51, A58), so that a client
// balancing with weighted_round_robin
// (google.golang.org/grpc/balancer/weightedroundrobin) sends less to a
// busy replica before it sheds anything:
//
//   - per call: ServerOptions then also put grpc-go's ORCA per-call
//     interceptor (orca.CallMetricsServerOption) before the chain, and
//     every call's trailer carries the report (endpoint-load-metrics-bin);
//     a handler's own values (orca.CallMetricsRecorderFromContext) win
//     over the Guard's;
//   - out of band: RegisterLoadReports puts the ORCA service on the
//     server, which streams the report to clients that ask
//     (weighted_round_robin's enableOobLoadReport), no more often than
//     grpc-go allows (30s).
//
// What is reported is LoadReport: the utilisation of the stages holding
// requests in flight, the requests per second and the ones refused for
// overload, measured over a window that closes, at a report, after
// 100ms and 100 requests or after 1s. A balancer's weight is QPS over
// (Utilization + EPS/QPS): what a replica serves per unit of load, less
// for what it refuses. The Guard logs each window at debug level;
// LoadReport returns the last one.
//
// It costs a few atomic additions per request in the chain and, per
// call, the marshalled report in its trailer (see BenchmarkLoadReports).
func WithLoadReports() Option {
	return func(c *config) { c.loadReports = true }
}

// newMeter makes the load meter over the stages that hold requests in
// flight, read where each keeps its count, so a policy reload that
// changes a capacity or a cap is reported at once.
func (g *Guard) newMeter(shed *shedder.Shedder, conc *concurrency.Limiter, adaptive *concurrency.Adaptive) *load.Meter {
	sources := []load.Source{
		{Name: "shedder", InFlight: shed.InFlight, Limit: shed.Capacity},
		{Name: "concurrency", InFlight: conc.InFlight, Limit: conc.Global},
	}
	if adaptive != nil {
		sources = append(sources, load.Source{Name: "concurrency.adaptive", InFlight: adaptive.InFlight, Limit: adaptive.Limit})
	}
	logger, clk := g.c.logger, g.c.clock
	if clk == nil {
		clk = floodgate.SystemClock()
	}
	return load.New(clk, func(r load.Report) {
		if logger.Enabled(context.Background(), -4) { // slog.LevelDebug, without its args' cost
			logger.Debug("floodgate: load report", "utilization", r.Utilization, "stage", r.Stage,
				"qps", r.QPS, "eps", r.EPS, "window", r.Window, "requests", r.Arrivals, "refused", r.Refused)
		}
	}, sources...)
}

// metered counts, for the load meter, the requests reaching the chain
// (first, on its first stage) and the ones a stage refuses for
// overload: a shedder's or an in-flight limiter's deny.
type metered struct {
	a     floodgate.Admitter
	m     *load.Meter
	first bool
}

// Unwrap returns the stage w counts (floodgate's unwrap convention).
func (w metered) Unwrap() floodgate.Admitter { return w.a }

func (w metered) Admit(ctx context.Context, r *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
	if w.first {
		w.m.Arrive()
	}
	d, done, err := w.a.Admit(ctx, r)
	if !d.Allowed && (d.Stage == floodgate.StageShedder || d.Stage == floodgate.StageConcurrency) {
		w.m.Refuse()
	}
	return d, done, err
}

// LoadReport returns the load the Guard reports (WithLoadReports): the
// last closed window, or the open one before any has closed. It closes
// the open window if it is due, as a report to a client would. Without
// WithLoadReports it is the zero LoadReport.
func (g *Guard) LoadReport() LoadReport {
	if g.meter == nil {
		return LoadReport{}
	}
	r := g.meter.Report()
	return LoadReport{Utilization: r.Utilization, Stage: r.Stage, QPS: r.QPS, EPS: r.EPS, Window: r.Window}
}

// ServerMetrics is the ORCA report of the load (orca.ServerMetricsProvider).
func (p orcaProvider) ServerMetrics() *orca.ServerMetrics {
	r := p.g.LoadReport()
	return &orca.ServerMetrics{
		CPUUtilization: -1,
		MemUtilization: -1,
		AppUtilization: r.Utilization,
		QPS:            r.QPS,
		EPS:            r.EPS,
		Utilization:    map[string]float64{},
		RequestCost:    map[string]float64{},
		NamedMetrics:   map[string]float64{},
	}
}

// orcaProvider is the Guard as an orca.ServerMetricsProvider.
type orcaProvider struct{ g *Guard }

// RegisterLoadReports puts the ORCA out-of-band load report service
// (xds.service.orca.v3.OpenRcaService) on s, streaming LoadReport to
// the clients that ask, every 30s at most (grpc-go's least interval) or
// less often if a client asks. It needs WithLoadReports.
func (g *Guard) RegisterLoadReports(s grpc.ServiceRegistrar) error {
	if g.meter == nil {
		return errors.New("guard: RegisterLoadReports needs WithLoadReports")
	}
	if s == nil {
		return errors.New("guard: RegisterLoadReports: nil server")
	}
	if err := orca.Register(s, orca.ServiceOptions{ServerMetricsProvider: orcaProvider{g}}); err != nil {
		return fmt.Errorf("guard: RegisterLoadReports: %w", err)
	}
	return nil
}

// perCallOptions are the server options of the per-call reports: grpc-go's
// ORCA interceptor first, then one asking it for a report on every call.
func (g *Guard) perCallOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		orca.CallMetricsServerOption(orcaProvider{g}),
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			orca.CallMetricsRecorderFromContext(ctx) // a recorder made is a report sent
			return handler(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			orca.CallMetricsRecorderFromContext(ss.Context())
			return handler(srv, ss)
		}),
	}
}
