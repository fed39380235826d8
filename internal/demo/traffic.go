package demo

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/shoppb"
	"github.com/floodgate-go/floodgate/shedder"
)

// Generator offers one kind of traffic at a rate that may change over the
// run (open loop: requests are sent on schedule whether or not earlier ones
// have answered, as real clients do).
type Generator struct {
	// Name describes the traffic.
	Name string
	// Tenant and Tier identify the caller (sent as trusted headers).
	Tenant, Tier string
	// Users and IPs are cycled through, one per request.
	Users, IPs []string
	// Scenario groups attack traffic ("attack", "brute-force"); empty for
	// ordinary tenant traffic.
	Scenario string
	// Route is the HTTP route ("GET /v1/search") or the gRPC method
	// ("/floodgate.shop.v1.Shop/Search").
	Route string
	// Priority is the class the request belongs to (for the report). When
	// Header is set it is also sent as the trusted priority header.
	Priority floodgate.Priority
	Header   bool
	// Rate is the offered rate, in requests per second, at offset t.
	Rate func(t time.Duration) float64
	// Event, when set, names the scenario event this traffic belongs to
	// ("surge", "scraper", "brute-force"); the report marks it from From
	// to To.
	Event    string
	From, To time.Duration
}

// during makes g send rps from from to to, as part of the event kind.
func during(g Generator, kind string, from, to time.Duration, rps float64) Generator {
	g.Rate, g.Event, g.From, g.To = window(from, to, rps), kind, from, to
	return g
}

// eventNames are the markers' labels, by event kind.
var eventNames = map[string]string{
	"scraper":     "scraper (one IP)",
	"surge":       "bigcorp + synthetics surge",
	"brute-force": "login brute force",
}

// Events returns the scenario's events: one per kind of event traffic in
// gens, from the earliest start to the latest end of its generators.
func Events(gens []Generator) []Event {
	var out []Event
	idx := map[string]int{}
	for _, g := range gens {
		if g.Event == "" {
			continue
		}
		i, ok := idx[g.Event]
		if !ok {
			idx[g.Event] = len(out)
			name := eventNames[g.Event]
			if name == "" {
				name = g.Event
			}
			out = append(out, Event{Name: name, Kind: g.Event, From: g.From, To: g.To})
			continue
		}
		out[i].From, out[i].To = min(out[i].From, g.From), max(out[i].To, g.To)
	}
	slices.SortStableFunc(out, func(a, b Event) int { return cmp.Compare(a.From, b.From) })
	return out
}

func steady(rps float64) func(time.Duration) float64 {
	return func(time.Duration) float64 { return rps }
}

func window(from, to time.Duration, rps float64) func(time.Duration) float64 {
	return func(t time.Duration) float64 {
		if t >= from && t < to {
			return rps
		}
		return 0
	}
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i+1)
	}
	return out
}

// ips returns n documentation addresses (RFC 5737, 198.51.100.0/24) starting
// at host first. They only ever appear in X-Forwarded-For headers the load
// generator sends to the loopback service; nothing is sent to them.
func ips(first, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "198.51.100." + strconv.Itoa(first+i)
	}
	return out
}

// Scenario is the demo's traffic for a run of length d: four tenants on
// three plan tiers sending a mixed workload, synthetic test traffic, an
// enterprise batch surge in the middle of the run that pushes the service
// past capacity (the shedder drops test traffic, then reads), a scraper
// hammering search from one address, and a password brute force.
func Scenario(d time.Duration) []Generator {
	frac := func(f float64) time.Duration { return time.Duration(float64(d) * f) }
	var gs []Generator
	tenants := []struct {
		name, tier string
		ipBase     int
	}{
		{"tinyco", "free", 10}, {"hobbyist", "free", 20}, {"growthco", "pro", 30}, {"bigcorp", "enterprise", 40},
	}
	for _, t := range tenants {
		users := names(t.name+"-user", 6)
		addrs := ips(t.ipBase, 6)
		mk := func(route string, p floodgate.Priority, rps float64) Generator {
			return Generator{Name: t.name + " " + route, Tenant: t.name, Tier: t.tier, Users: users, IPs: addrs,
				Route: route, Priority: p, Rate: steady(rps)}
		}
		gs = append(gs,
			mk("GET /v1/items/{id}", floodgate.PriorityRead, 20),
			mk("POST /v1/items", floodgate.PriorityWrite, 10),
			mk("POST /v1/payments", floodgate.PriorityCritical, 5),
			mk("GET /v1/search", floodgate.PriorityRead, 6),
			mk("/floodgate.shop.v1.Shop/Search", floodgate.PriorityRead, 5),
			mk("/floodgate.shop.v1.Shop/Pay", floodgate.PriorityCritical, 3),
		)
	}
	surgeUsers, surgeIPs := names("bigcorp-batch", 60), ips(100, 60)
	surgeFrom, surgeTo := frac(0.35), frac(0.7)
	gs = append(gs,
		Generator{Name: "synthetic checks", Tenant: "synthetics", Tier: "enterprise", Users: names("probe", 20), IPs: ips(200, 20),
			Route: "GET /v1/items/{id}", Priority: floodgate.PriorityTest, Header: true, Rate: steady(80)},
		during(Generator{Name: "bigcorp batch surge (reads)", Tenant: "bigcorp", Tier: "enterprise", Users: surgeUsers, IPs: surgeIPs,
			Route: "GET /v1/items/{id}", Priority: floodgate.PriorityRead}, "surge", surgeFrom, surgeTo, 1000),
		during(Generator{Name: "bigcorp batch surge (writes)", Tenant: "bigcorp", Tier: "enterprise", Users: surgeUsers, IPs: surgeIPs,
			Route: "POST /v1/items", Priority: floodgate.PriorityWrite}, "surge", surgeFrom, surgeTo, 200),
		during(Generator{Name: "synthetic surge", Tenant: "synthetics", Tier: "enterprise", Users: names("probe", 20), IPs: ips(200, 20),
			Route: "GET /v1/items/{id}", Priority: floodgate.PriorityTest, Header: true}, "surge", surgeFrom, surgeTo, 500),
		// Before the surge: the limiter, not the shedder, stops it.
		during(Generator{Name: "scraper from one address", Tenant: "scraper", Tier: "pro", Users: names("scraper", 30),
			IPs: []string{"203.0.113.7"}, Scenario: "attack", Route: "GET /v1/items/{id}", Priority: floodgate.PriorityRead},
			"scraper", frac(0.1), frac(0.32), 400),
		during(Generator{Name: "login brute force", Tenant: "tinyco", Tier: "free", Users: []string{"admin"},
			IPs: []string{"203.0.113.66"}, Scenario: "brute-force", Route: "POST /v1/login", Priority: floodgate.PriorityCritical},
			"brute-force", 0, d, 8),
	)
	return gs
}

// maxOutstanding bounds the requests in the air at once, so the generator
// itself can never run away; a request that would exceed it is counted as
// failed (the report says so).
const maxOutstanding = 4096

type driver struct {
	base   string
	http   *http.Client
	shop   shoppb.ShopClient
	stats  *Stats
	start  time.Time
	window time.Duration

	sem       chan struct{}
	overflow  atomic.Int64
	sec       [numOutcomes]atomic.Int64 // outcomes since the last progress line
	sentTotal atomic.Int64
}

func (d *driver) run(ctx context.Context, gens []Generator) {
	d.sem = make(chan struct{}, maxOutstanding)
	var wg sync.WaitGroup
	for i := range gens {
		wg.Add(1)
		go func(g *Generator) {
			defer wg.Done()
			d.generate(ctx, g, &wg)
		}(&gens[i])
	}
	wg.Wait()
}

const tick = 10 * time.Millisecond

func (d *driver) generate(ctx context.Context, g *Generator, wg *sync.WaitGroup) {
	t := time.NewTicker(tick)
	defer t.Stop()
	var owed float64
	n := 0
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			off := now.Sub(d.start)
			if off >= d.window {
				return // the run's last bucket ends here: nothing starts after it
			}
			// A ticker drops ticks when this loop falls behind: a starved
			// machine is offered less, never a burst to catch up.
			owed += g.Rate(off) * tick.Seconds()
			for ; owed >= 1; owed-- {
				select {
				case d.sem <- struct{}{}:
				default:
					d.overflow.Add(1)
					d.record(g, time.Now(), 0, Failed)
					continue
				}
				id := n
				n++
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer func() { <-d.sem }()
					d.send(ctx, g, g.Users[id%len(g.Users)], g.IPs[id%len(g.IPs)], id)
				}()
			}
		}
	}
}

func (d *driver) send(ctx context.Context, g *Generator, user, ip string, n int) {
	// Requests already sent are allowed to finish past the end of the run.
	reqCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	begin := time.Now()
	var o Outcome
	if strings.HasPrefix(g.Route, "/") {
		o = d.sendGRPC(reqCtx, g, user, ip)
	} else {
		o = d.sendHTTP(reqCtx, g, user, ip, n)
	}
	d.record(g, begin, time.Since(begin), o)
}

func (d *driver) sendHTTP(ctx context.Context, g *Generator, user, ip string, n int) Outcome {
	method, path, _ := strings.Cut(g.Route, " ")
	path = strings.Replace(path, "{id}", strconv.Itoa(n%1000), 1)
	if strings.HasSuffix(path, "/search") {
		path += "?q=lamp"
	}
	req, err := http.NewRequestWithContext(ctx, method, d.base+path, nil)
	if err != nil {
		return Failed
	}
	setIdentity(req.Header.Set, g, user, ip)
	resp, err := d.http.Do(req)
	if err != nil {
		return Failed
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	switch {
	case resp.StatusCode < 300:
		return Allowed
	case resp.StatusCode == http.StatusTooManyRequests:
		return Limited
	case resp.StatusCode == http.StatusServiceUnavailable:
		return Shed
	}
	return Failed
}

func (d *driver) sendGRPC(ctx context.Context, g *Generator, user, ip string) Outcome {
	md := metadata.MD{}
	setIdentity(func(k, v string) { md.Set(k, v) }, g, user, ip)
	ctx = metadata.NewOutgoingContext(ctx, md)
	var err error
	switch g.Route {
	case "/floodgate.shop.v1.Shop/Search":
		_, err = d.shop.Search(ctx, &shoppb.SearchRequest{Query: "lamp"}, grpc.WaitForReady(true))
	case "/floodgate.shop.v1.Shop/Pay":
		_, err = d.shop.Pay(ctx, &shoppb.PayRequest{AmountCents: 1999}, grpc.WaitForReady(true))
	case "/floodgate.shop.v1.Shop/Login":
		_, err = d.shop.Login(ctx, &shoppb.LoginRequest{User: user, Password: "hunter2"}, grpc.WaitForReady(true))
	default:
		return Failed
	}
	switch status.Code(err) {
	case codes.OK:
		return Allowed
	case codes.ResourceExhausted:
		return Limited
	case codes.Unavailable:
		return Shed
	}
	return Failed
}

func setIdentity(set func(k, v string), g *Generator, user, ip string) {
	set(headerTenant, g.Tenant)
	set(headerTier, g.Tier)
	set(headerUser, user)
	set("X-Forwarded-For", ip)
	if g.Header {
		set(headerPriority, g.Priority.String())
	}
}

func (d *driver) record(g *Generator, at time.Time, lat time.Duration, o Outcome) {
	d.sec[o].Add(1)
	d.sentTotal.Add(1)
	groups := make([]string, 0, 5)
	series := make([]string, 0, 3)
	groups = append(groups, "all")
	series = append(series, "all")
	if g.Scenario != "" {
		groups = append(groups, "scenario="+g.Scenario)
	} else {
		groups = append(groups, "tier="+g.Tier, "tier="+g.Tier+",priority="+g.Priority.String())
		series = append(series, "tier="+g.Tier)
	}
	groups = append(groups, "priority="+g.Priority.String())
	series = append(series, "priority="+g.Priority.String())
	d.stats.Record(at, lat, o, groups, series)
}

func (d *driver) progress(ctx context.Context, w io.Writer, shed *shedder.Shedder) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for sec := 1; ; sec++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var c [numOutcomes]int64
		for i := range c {
			c[i] = d.sec[i].Swap(0)
		}
		total := c[Allowed] + c[Limited] + c[Shed] + c[Failed]
		line := fmt.Sprintf("%3ds  answered %5d/s  allowed %5d  limited %5d  shed %5d  in flight %2d/%d",
			sec, total, c[Allowed], c[Limited], c[Shed], shed.InFlight(), shed.Capacity())
		if c[Failed] > 0 {
			line += fmt.Sprintf("  failed %d", c[Failed])
		}
		fmt.Fprintln(w, line)
	}
}
