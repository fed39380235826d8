package grpcmw_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/realip"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/selector"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate/grpcmw"
	"github.com/floodgate-go/floodgate/interceptor"
	"github.com/floodgate-go/floodgate/internal/shoppb"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// A server running go-grpc-middleware's logging, realip, selector and
// recovery around floodgate, behind a proxy on 127.0.0.1 that forwards
// X-Forwarded-For: the per-address rule counts the client realip resolved,
// the log line of each call carries floodgate's decision, and Pay is never
// limited.
func Example() {
	policy, err := tiers.Load([]byte("rules:\n  - {name: per-ip, key: [ip], rate: 2/1m, burst: 2}\n"))
	if err != nil {
		panic(err)
	}
	store, err := memstore.New()
	if err != nil {
		panic(err)
	}
	limits, err := tiers.NewLimiter(store, policy)
	if err != nil {
		panic(err)
	}
	fg, err := interceptor.New(grpcmw.WithRealIP(), grpcmw.WithLogFields())
	if err != nil {
		panic(err)
	}
	exempt := grpcmw.MustExempt("/floodgate.shop.v1.Shop/Pay")
	// The logger prints only floodgate's fields, to keep the output short.
	logger := logging.LoggerFunc(func(_ context.Context, _ logging.Level, msg string, fields ...any) {
		if msg != "finished call" {
			return
		}
		f := map[any]any{}
		for i := 0; i+1 < len(fields); i += 2 {
			f[fields[i]] = fields[i+1]
		}
		fmt.Printf("log: %s %v policy=%v\n", f[logging.MethodFieldKey], f[grpcmw.FieldDecision], f[grpcmw.FieldPolicy])
	})
	proxies := []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(
		logging.UnaryServerInterceptor(logger),
		realip.UnaryServerInterceptorOpts(realip.WithTrustedPeers(proxies), realip.WithHeaders([]string{realip.XForwardedFor})),
		selector.UnaryServerInterceptor(fg.UnaryServer(limits), exempt),
		recovery.UnaryServerInterceptor(),
	))
	shoppb.RegisterShopServer(srv, shop{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	client := shoppb.NewShopClient(conn)

	ctx := context.Background()
	for _, addr := range []string{"203.0.113.7", "203.0.113.7", "203.0.113.7", "198.51.100.9"} {
		fwd := metadata.AppendToOutgoingContext(ctx, "x-forwarded-for", addr)
		_, err := client.Search(fwd, &shoppb.SearchRequest{Query: "lamp"})
		fmt.Printf("search from %s: %v\n", addr, status.Code(err))
	}
	fwd := metadata.AppendToOutgoingContext(ctx, "x-forwarded-for", "203.0.113.7")
	_, err = client.Pay(fwd, &shoppb.PayRequest{AmountCents: 1})
	fmt.Printf("pay from 203.0.113.7: %v\n", status.Code(err))
	// Output:
	// log: Search allowed policy=per-ip
	// search from 203.0.113.7: OK
	// log: Search allowed policy=per-ip
	// search from 203.0.113.7: OK
	// log: Search limited policy=per-ip
	// search from 203.0.113.7: ResourceExhausted
	// log: Search allowed policy=per-ip
	// search from 198.51.100.9: OK
	// log: Pay <nil> policy=<nil>
	// pay from 203.0.113.7: OK
}
