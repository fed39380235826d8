package interceptor

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/testpb"
)

// TestForwardedUnbalancedQuoteKeepsProxyElement: a trusted proxy appends
// its own element ", for=<client>" to the Forwarded line the client sent;
// a client that sends an unbalanced quote is still identified by the
// address the proxy vouched for. It made the proxy's element unreadable and
// was identified as the trusted proxy itself (escaping its per-IP limit
// and deny: lists, or landing in an exempt internal range).
func TestForwardedUnbalancedQuoteKeepsProxyElement(t *testing.T) {
	t.Parallel()
	st := &stage{}
	srv := muxServer(t, mustHTTP(st, WithTrustedProxies("127.0.0.1", "10.0.0.0/8"), WithClientIPHeader(Forwarded)))
	for _, clientSent := range []string{`for="`, `for=x"`, `for="1.1.1.1\`} {
		// what the trusted proxy forwards: the client's value, then its own element.
		hdr := clientSent + ", for=203.0.113.9"
		if res := get(t, srv, "GET", "/v1/items/1", "Forwarded", hdr); res.status != 200 {
			t.Fatal(res.status)
		}
		rs := st.requests()
		got := rs[len(rs)-1].Identity.IP
		if got != netip.MustParseAddr("203.0.113.9") {
			t.Errorf("Forwarded %q: client IP = %v, want 203.0.113.9 (the hop the trusted proxy appended)", hdr, got)
		}
	}
}

// TestLaterStageDenyIsIgnoredForEarlierStages: one interceptor per stage
// (the composition the package doc recommends), gRPC and HTTP: when a later
// stage denies, an earlier stage's Done is told floodgate.Ignored, as inside
// one floodgate.Chain; it was told OutcomeDropped (an overload signal, no
// refund).
func TestLaterStageDenyIsIgnoredForEarlierStages(t *testing.T) {
	t.Parallel()
	denyD := floodgate.Decision{Stage: floodgate.StageTiers, Policy: "p", Limit: 1, Window: time.Second, RetryAfter: time.Second}

	// Reference: one interceptor around a Chain.
	{
		first, denier := &stage{}, &stage{decide: deny(denyD)}
		c := unaryServer(t, &echoServer{}, mustUnary(floodgate.Chain{first, denier}))
		if _, err := c.Plain(testCtx(t), &testpb.EchoRequest{}); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("chain err = %v", err)
		}
		if rs := first.finished(); len(rs) != 1 || rs[0] != floodgate.Ignored {
			t.Fatalf("chain: first stage results %+v, want [Ignored]", rs)
		}
	}

	// gRPC: one interceptor per stage, from one New.
	{
		first, denier := &stage{}, &stage{decide: deny(denyD)}
		fg := MustNew()
		c := unaryServer(t, &echoServer{}, fg.UnaryServer(first), fg.UnaryServer(denier))
		if _, err := c.Plain(testCtx(t), &testpb.EchoRequest{}); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("per-stage err = %v", err)
		}
		if rs := first.finished(); len(rs) != 1 || rs[0] != floodgate.Ignored {
			t.Errorf("gRPC per-stage interceptors: first stage results %+v, want [%+v] as with a Chain", rs, floodgate.Ignored)
		}
	}

	// HTTP: one middleware per stage, from one New.
	{
		first, denier := &stage{}, &stage{decide: deny(denyD)}
		fg := MustNew()
		srv := muxServer(t, func(h http.Handler) http.Handler { return fg.HTTP(first)(fg.HTTP(denier)(h)) })
		if res := get(t, srv, "GET", "/v1/items/1"); res.status != 429 {
			t.Fatalf("status %d", res.status)
		}
		if rs := first.finished(); len(rs) != 1 || rs[0] != floodgate.Ignored {
			t.Errorf("HTTP per-stage middleware: first stage results %+v, want [%+v] as with a Chain", rs, floodgate.Ignored)
		}
	}
}

// TestInformationalStatusLeavesFinalStatus: a handler that sends 103 Early
// Hints and then fails with 503 is an overload signal (OutcomeDropped);
// the 1xx code was recorded as the status and reported OutcomeSuccess.
func TestInformationalStatusLeavesFinalStatus(t *testing.T) {
	t.Parallel()
	st := &stage{}
	h := mustHTTP(st, WithRoute(func(*http.Request) string { return "r" }))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Link", "</a.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	if res := get(t, srv, "GET", "/"); res.status != 503 {
		t.Fatalf("status %d, want 503", res.status)
	}
	rs := st.finished()
	if len(rs) != 1 || rs[0].Outcome != floodgate.OutcomeDropped {
		t.Errorf("results %+v, want one with OutcomeDropped (final status 503)", rs)
	}
}
