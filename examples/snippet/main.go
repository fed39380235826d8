// Command snippet is the chain shown in examples/README.md (and the top
// README), compiled and tested so the two never drift apart: the README holds
// the text between the snippet markers below, verbatim.
//
//	cd examples && go run ./snippet
package main

import (
	"errors"
	"fmt"
	"net/http"
	"os"

	"google.golang.org/grpc"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/interceptor"
	"github.com/floodgate-go/floodgate/shedder"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

func main() {
	mux := http.NewServeMux()
	if _, _, err := newServers("policy.yaml", mux); err != nil {
		fmt.Fprintln(os.Stderr, "snippet:", err)
		os.Exit(1)
	}
	fmt.Println("chain built: shedder, concurrency, tiers")
}

// snippet:start
func newServers(policyFile string, mux *http.ServeMux) (*grpc.Server, http.Handler, error) {
	policy, err := tiers.LoadFile(policyFile) // every error names its line
	if err != nil {
		return nil, nil, err
	}
	limits, err := tiers.NewLimiter(memstore.New(), policy) // or fallback.New(redisstore.New(...))
	shed, err2 := shedder.New(64)                           // capacity: requests in flight
	conc, err3 := concurrency.New(concurrency.WithGlobal(128))
	if err := errors.Join(err, err2, err3); err != nil {
		return nil, nil, err
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(
			interceptor.UnaryServer(shed),   // 1. shed low priorities near capacity
			interceptor.UnaryServer(conc),   // 2. cap requests in flight
			interceptor.UnaryServer(limits), // 3. hierarchical rate limits
		),
		grpc.ChainStreamInterceptor(interceptor.StreamServer(shed), interceptor.StreamServer(conc), interceptor.StreamServer(limits)),
	)
	handler := interceptor.HTTP(floodgate.Chain{shed, conc, limits}, interceptor.WithServeMux(mux))(mux)
	return srv, handler, nil
}

// snippet:end
